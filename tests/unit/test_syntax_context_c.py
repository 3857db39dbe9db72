import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("system include being typed", "#include <std|\n", K.IMPORT, mid_typing=True),
    Case("half-typed prototype", "int add(int a, |\n", K.SIGNATURE, mid_typing=True),
    Case("pointer-returning prototype", "char *dup(const char *s, |\n", K.SIGNATURE, mid_typing=True),
    Case("unclosed printf", 'int f(void) {\n    printf("%d\\n", |\n', K.CALL_ARGS, mid_typing=True,
         block_indent=0),
    Case("unclosed array initializer", "int xs[] = {1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unterminated string", 'int f(int n) {\n    char *s = "ab|\n}\n', K.STRING, mid_typing=True),
    Case("unterminated block comment", "int f(void) {\n    /* unterminated |\n    return 0;\n}\n", K.COMMENT,
         mid_typing=True),
    Case("unterminated doxygen comment", "/** Doc |\nint f(void);\n", K.DOCSTRING, mid_typing=True),
    Case("struct fields", "struct P {\n    int a;\n    |\n};\n", K.SIMPLE_BODY, block_indent=0),
    Case("enum members", "enum color {\n    RED,\n    |\n};\n", K.SIMPLE_BODY, block_indent=0),
    Case("nested loops", """
        int f(int n) {
            int t = 0;
            for (int i = 0; i < n; i++) {
                for (int j = 0; j < i; j++) {
                    |
                }
            }
            return t;
        }
        """, K.COMPLEX_BODY, block_indent=8),
    Case("straight-line initialisation", """
        void init(struct P *p) {
            p->a = 0;
            p->b = 0;
            |
        }
        """, K.SIMPLE_BODY, block_indent=0),
    Case("closed call", "int main(void) {\n    puts(|);\n}\n", K.CALL_ARGS),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_c_cursor_context(case: Case) -> None:
    check("c", case)
