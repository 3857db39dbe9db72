import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("unclosed named import", "import { readFile, wr|\n", K.IMPORT, mid_typing=True),
    Case("closed named import", 'import { readFile, wr| } from "fs";\n', K.IMPORT),
    Case("import source being typed", 'import fs from "f|\n', K.IMPORT, mid_typing=True),
    Case("half-typed function", "function add(a, b|\n", K.SIGNATURE, mid_typing=True),
    Case("arrow parameters", "const f = (a, |\n", K.SIGNATURE, mid_typing=True),
    Case("unterminated string in a body", """
        function add(a, b) {
          const s = "abc|
        }
        """, K.STRING, mid_typing=True, block_indent=0),
    Case("unterminated template literal", "const s = `line one\nline |\n", K.STRING, mid_typing=True),
    Case("unclosed array", "const xs = [1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unclosed object across lines", """
        const cfg = {
          a: 1,
          |
        """, K.COLLECTION, mid_typing=True, block_indent=0),
    Case("unclosed call in a body", """
        function f(a) {
          console.log(a, |
          return 1;
        }
        """, K.CALL_ARGS, mid_typing=True),
    Case("closed call", "console.log(a, |);\n", K.CALL_ARGS),
    Case("nested loops with unclosed braces", """
        function f(a) {
          for (let i = 0; i < a; i++) {
            if (i % 2 === 0) {
              |
        """, K.COMPLEX_BODY, mid_typing=True, block_indent=4),
    Case("nested loops, closed", """
        function f(a) {
          for (let i = 0; i < a; i++) {
            if (i % 2 === 0) {
              |
            }
          }
        }
        """, K.COMPLEX_BODY, block_indent=4),
    Case("assignments in a constructor", """
        class A {
          constructor(a, b) {
            this.a = a;
            |
          }
        }
        """, K.SIMPLE_BODY, block_indent=2),
    Case("method being declared in a class", "class A {\n  add(a, |\n}\n", K.SIGNATURE, mid_typing=True),
    Case("JSDoc", """
        /**
         * Adds |
         */
        function f() {}
        """, K.DOCSTRING),
    Case("line comment", "function f() {\n  // todo |\n}\n", K.COMMENT),
    Case("callback body inside call arguments", """
        items.forEach(function (x) {
          total = x;
          |
        });
        """, K.SIMPLE_BODY, block_indent=0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_javascript_cursor_context(case: Case) -> None:
    check("javascript", case)
