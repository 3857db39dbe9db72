import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("import source being typed", 'import { Component } from "@angular/co|\n', K.IMPORT, mid_typing=True),
    Case("half-typed typed parameters", "function add(a: number, b|\n", K.SIGNATURE, mid_typing=True),
    Case("return type being typed", "function add(a: number): |\n", K.SIGNATURE, mid_typing=True),
    Case("typed arrow parameters", "const f = (a: number, |\n", K.SIGNATURE, mid_typing=True),
    Case("decorator with an unclosed object", "@Component({sel|\nclass A {}\n", K.DECORATOR, mid_typing=True),
    Case("unterminated string", 'const name: string = "ab|\n', K.STRING, mid_typing=True),
    Case("unclosed constructor call", "const m = new Map<string, number>(|\n", K.CALL_ARGS, mid_typing=True),
    Case("unclosed typed array", "const xs: number[] = [1, |\n", K.COLLECTION, mid_typing=True),
    Case("interface members", "interface P {\n  a: number;\n  |\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("enum members", "enum Color {\n  Red,\n  |\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("nested loops", """
        function f(n: number): number {
          let t = 0;
          for (let i = 0; i < n; i++) {
            while (t < i) {
              |
            }
          }
          return t;
        }
        """, K.COMPLEX_BODY, block_indent=4),
    Case("field assignments in a constructor", """
        class Point {
          constructor(x: number, y: number) {
            this.x = x;
            |
          }
        }
        """, K.SIMPLE_BODY, block_indent=2),
    Case("comment", "// returns the |\nfunction f(): void {}\n", K.COMMENT),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_typescript_cursor_context(case: Case) -> None:
    check("typescript", case)
