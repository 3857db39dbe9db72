import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("import being typed", "import java.util.|\n", K.IMPORT, mid_typing=True),
    Case("half-typed method parameters", "class A {\n    public int add(int a, |\n", K.SIGNATURE,
         mid_typing=True, block_indent=0),
    Case("generic return type", "class A {\n    public List<String> names(int |\n", K.SIGNATURE, mid_typing=True),
    Case("annotation being typed", "class A {\n    @Overr|\n    public String toString() { return \"\"; }\n}\n",
         K.DECORATOR),
    Case("annotation with an unterminated string", 'class A {\n    @SuppressWarnings("unch|\n    void f() {}\n}\n',
         K.DECORATOR, mid_typing=True),
    Case("unterminated string", 'class A {\n    void f() {\n        String s = "ab|\n    }\n}\n', K.STRING,
         mid_typing=True),
    Case("unclosed call", "class A {\n    void f() {\n        System.out.println(a, |\n", K.CALL_ARGS,
         mid_typing=True, block_indent=4),
    Case("unclosed array initializer", "class A {\n    int[] xs = {1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("fields", "public class A {\n    private int a;\n    private int b;\n    |\n}\n", K.SIMPLE_BODY,
         block_indent=0),
    Case("constructor assignments", """
        class P {
            P(int x, int y) {
                this.x = x;
                |
            }
        }
        """, K.SIMPLE_BODY, block_indent=4),
    Case("nested loops", """
        class M {
            int f(int[][] g) {
                int t = 0;
                for (int[] row : g) {
                    for (int x : row) {
                        |
                    }
                }
                return t;
            }
        }
        """, K.COMPLEX_BODY, block_indent=12),
    Case("javadoc", "class A {\n    /**\n     * Returns the |\n     */\n    int f() { return 1; }\n}\n", K.DOCSTRING),
    Case("line comment", "class A {\n    // cache the |\n}\n", K.COMMENT),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_java_cursor_context(case: Case) -> None:
    check("java", case)
