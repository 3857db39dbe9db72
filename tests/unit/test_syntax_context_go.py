import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("unclosed import block", 'import (\n\t"fmt"\n\t"o|\n', K.IMPORT, mid_typing=True, block_indent=0),
    Case("single import being typed", 'package main\n\nimport "fm|\n', K.IMPORT, mid_typing=True),
    Case("half-typed parameters", "func Add(a int, b|\n", K.SIGNATURE, mid_typing=True),
    Case("result type being typed", "func Add(a int, b int) |\n", K.SIGNATURE),
    Case("method with a receiver", "func (s *Server) Handle(w http.ResponseWriter, |\n", K.SIGNATURE,
         mid_typing=True),
    Case("unterminated string", 'func f() {\n\ts := "abc|\n}\n', K.STRING, mid_typing=True),
    Case("unterminated raw string", "func f() {\n\ts := `raw\ntext |\n", K.STRING, mid_typing=True),
    Case("unclosed slice literal", "func f() {\n\txs := []int{1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unclosed call", "func f() {\n\tfmt.Println(a, |\n", K.CALL_ARGS, mid_typing=True, block_indent=0),
    Case("nested loops with unclosed braces", """
        func f(n int) {
        \tfor i := 0; i < n; i++ {
        \t\tif i%2 == 0 {
        \t\t\t|
        """, K.COMPLEX_BODY, mid_typing=True, block_indent=8),  # two tabs: 8 columns
    Case("struct fields", "type P struct {\n\tA int\n\t|\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("straight-line assignments", """
        func NewServer(addr string) *Server {
        \ts := &Server{}
        \ts.addr = addr
        \t|
        \treturn s
        }
        """, K.SIMPLE_BODY, block_indent=0),
    Case("switch inside a loop", """
        func f(xs []int) {
        \tfor _, x := range xs {
        \t\tswitch x {
        \t\tcase 1:
        \t\t\t|
        \t\t}
        \t}
        }
        """, K.COMPLEX_BODY),
    Case("comment", "// Add returns the |\nfunc Add() {}\n", K.COMMENT),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_go_cursor_context(case: Case) -> None:
    check("go", case)
