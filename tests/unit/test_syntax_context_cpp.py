import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("local include being typed", '#include "foo|\n', K.IMPORT, mid_typing=True),
    Case("using directive", "using namespace st|\n", K.IMPORT, mid_typing=True),
    Case("qualified method definition", "int Foo::add(int a, |\n", K.SIGNATURE, mid_typing=True),
    Case("unclosed brace initialiser", "std::vector<int> v = {1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unterminated string in a stream", 'void f() {\n    std::cout << "hel|\n}\n', K.STRING, mid_typing=True),
    Case("unterminated raw string", 'auto s = R"(raw\ntext |\n', K.STRING, mid_typing=True),
    Case("unclosed algorithm call", "void f() {\n    std::sort(v.begin(), |\n", K.CALL_ARGS, mid_typing=True),
    Case("nested loops with unclosed braces", """
        template <typename T>
        T f(T a) {
            for (int i = 0; i < a; ++i) {
                while (x) {
                    |
        """, K.COMPLEX_BODY, mid_typing=True, block_indent=8),
    Case("class fields", "class P {\n  public:\n    int x;\n    |\n};\n", K.SIMPLE_BODY, block_indent=0),
    Case("straight-line body", """
        Point make() {
            Point p;
            p.x = 1;
            |
            return p;
        }
        """, K.SIMPLE_BODY, block_indent=0),
    Case("comment", "int f() {\n    // the |\n    return 0;\n}\n", K.COMMENT),
    Case("closed lambda call arguments", "auto n = std::count_if(v.begin(), v.end(), |);\n", K.CALL_ARGS),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cpp_cursor_context(case: Case) -> None:
    check("cpp", case)
