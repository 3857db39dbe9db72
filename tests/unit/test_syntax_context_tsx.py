import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check

CASES = [
    Case("import source being typed", 'import { useState } from "re|\n', K.IMPORT, mid_typing=True),
    Case("unterminated JSX attribute", """
        function App() {
          return <div className="a|
        }
        """, K.STRING, mid_typing=True),
    Case("arrow callback inside map", """
        function App() {
          return <div>{items.map((x) => |
        }
        """, K.CALL_ARGS, mid_typing=True),
    Case("destructured props being typed", "function Button({ label, on|\n", K.SIGNATURE, mid_typing=True),
    Case("hook call being typed", """
        function App() {
          const [count, setCount] = useState(|
        }
        """, K.CALL_ARGS, mid_typing=True),
    Case("unclosed style object", """
        function App() {
          return <Box sx={{ color: "red", |
        }
        """, K.COLLECTION, mid_typing=True),
    Case("props interface", "interface Props {\n  label: string;\n  |\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("component body of constants", """
        function App() {
          const title = "Home";
          |
          return <h1>{title}</h1>;
        }
        """, K.SIMPLE_BODY, block_indent=0),
    Case("JSX text", "const el = <p>Hello |</p>;\n", K.STRING),
    Case("loop with arithmetic in a handler", """
        function sum(xs: number[]) {
          let t = 0;
          for (const x of xs) {
            t += x * x - 1;
            |
          }
          return t;
        }
        """, K.COMPLEX_BODY, block_indent=2),
    Case("closed call arguments", "render(<App />, |);\n", K.CALL_ARGS),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tsx_cursor_context(case: Case) -> None:
    check("typescriptreact", case)
