import pytest

from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check, classify_marked

CASES = [
    Case("unclosed use list", "use std::collections::{HashMap, Ha|\n", K.IMPORT, mid_typing=True),
    Case("half-typed parameters", "fn add(a: i32, b|\n", K.SIGNATURE, mid_typing=True),
    Case("return type being typed", "fn add(a: i32) -> |\n", K.SIGNATURE, mid_typing=True),
    Case("unclosed attribute", "#[derive(Debug, Cl|\nstruct A;\n", K.DECORATOR, mid_typing=True),
    Case("unterminated string", 'fn f() {\n    let s = "ab|\n}\n', K.STRING, mid_typing=True),
    Case("unterminated raw string", 'fn f() {\n    let s = r#"raw\ntext |\n', K.STRING, mid_typing=True),
    Case("unclosed vec! macro", "fn f() {\n    let v = vec![1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unclosed println! macro", 'fn f() {\n    println!("{}", |\n', K.CALL_ARGS, mid_typing=True),
    Case("unclosed struct literal", "fn f() {\n    let p = Point { x: 1, |\n", K.COLLECTION, mid_typing=True),
    Case("enum variants", "enum E {\n    A,\n    |\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("struct fields", "struct P {\n    x: f64,\n    |\n}\n", K.SIMPLE_BODY, block_indent=0),
    Case("doc comment", "/// Adds |\nfn f() {}\n", K.DOCSTRING),
    Case("match inside a loop", """
        fn f(xs: &[i32]) -> i32 {
            let mut t = 0;
            for x in xs {
                match x {
                    0 => {
                        |
                    }
                    _ => t += x,
                }
            }
            t
        }
        """, K.COMPLEX_BODY),
    Case("a closed char literal before the cursor", "fn f() {\n    let c = 'a'|\n}\n", K.SIMPLE_BODY),
    Case("lifetimes are not strings", """
        fn first<'a>(x: &'a str) -> &'a str {
            let n = x.len();
            |
        }
        """, K.SIMPLE_BODY, block_indent=0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rust_cursor_context(case: Case) -> None:
    check("rust", case)


def test_block_indent_of_an_impl_method_body_is_the_fn_line() -> None:
    ctx = classify_marked("rust", "impl P {\n    fn new() -> Self {\n        |\n    }\n}\n")
    assert ctx.block_indent == 4
    assert ctx.kind == K.SIMPLE_BODY
