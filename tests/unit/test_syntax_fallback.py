"""The text-only classifier for languages without a grammar, and robustness of both."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsp_server.syntax.context import classify
from lsp_server.syntax.indent import classify_by_indentation, enclosing_headers, indent_width
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.types import ContextKind as K
from lsp_server.syntax.types import SyntaxContext
from tests.unit.syntax_cases import Case, check, classify_marked

LUA = [
    Case("require being typed", 'local json = require("js|\n', K.IMPORT),
    Case("function parameters", "function add(a, |\n", K.SIGNATURE),
    Case("local function parameters", "local function add(a, |\n", K.SIGNATURE),
    Case("unterminated string", 'print("hello |\n', K.STRING),
    Case("comment", "-- the |\n", K.COMMENT),
    Case("table literal", "local t = {1, 2, |\n", K.COLLECTION),
    Case("call arguments", "print(a, |\n", K.CALL_ARGS),
    Case("nested loops", """
        function f(n)
          for i = 1, n do
            if i % 2 == 0 then
              |
        """, K.COMPLEX_BODY, block_indent=4),
    Case("straight-line body", """
        function Point.new(x, y)
          local p = {}
          p.x = x
          |
        """, K.SIMPLE_BODY, block_indent=0),
    Case("blank top-level line", "local M = {}\n\n|\n", K.UNKNOWN, block_indent=-1),
    Case("multi-line table, new entry", "local t = {\n  a = 1,\n  |\n", K.COLLECTION, block_indent=0),
]


@pytest.mark.parametrize("case", LUA, ids=lambda c: c.name)
def test_lua_falls_back_to_text_heuristics(case: Case) -> None:
    check("lua", case)


@pytest.mark.parametrize(
    ("language", "marked", "kind"),
    [
        ("plaintext", 'def f(a):\n    """|\n', K.DOCSTRING),
        ("plaintext", "s = '''not a doc\n|\n", K.STRING),
        ("ruby", "def initialize(a)\n  @a = a\n  |\n", K.SIMPLE_BODY),
        ("ruby", "# frozen_string_literal: |\n", K.COMMENT),
        ("shellscript", "echo \"it's |\n", K.STRING),
        ("shellscript", "it's a comment # don't |\n", K.COMMENT),
        ("yaml", 'name: "spec|\n', K.STRING),
        ("kotlin", "import kotlinx.coroutines.|\n", K.IMPORT),
        ("kotlin", "@Compos|\nfun Greeting() {}\n", K.DECORATOR),
        ("kotlin", "fun greet(name: String, |\n", K.SIGNATURE),
        ("kotlin", "class P {\n    val x: Int = 0\n    |\n}\n", K.SIMPLE_BODY),
        ("kotlin", "/** Returns the |\n", K.DOCSTRING),
        ("kotlin", "fun f() {\n    /* note |\n", K.COMMENT),
        ("kotlin", "fun f() {\n    val xs = listOf(1, |\n", K.CALL_ARGS),
        ("kotlin", "fun f() {\n    val m = xs[i|\n", K.SIMPLE_BODY),  # a subscript is not a list
        ("zig", "/// Adds two numbers.\nfn add(a: i32, |\n", K.SIGNATURE),  # a doc line ends with its line
        ("zig", "/// Adds |\nfn add() void {}\n", K.DOCSTRING),
    ],
)
def test_other_languages_fall_back_to_text_heuristics(language: str, marked: str, kind: K) -> None:
    ctx = classify_marked(language, marked)
    assert ctx.kind == kind, ctx
    assert ctx.node_type == "text"
    assert ctx.language == language


def test_fallback_reports_the_same_line_geometry() -> None:
    ctx = classify_marked("lua", "function f(a)\n  return g(a|, 1)\nend\n")
    assert (ctx.line_prefix, ctx.line_suffix) == ("  return g(a", ", 1)")
    assert ctx.line_indent == 2 and ctx.block_indent == 0 and not ctx.at_line_start


def test_indent_width_counts_tabs_to_the_next_stop() -> None:
    assert indent_width("    x") == 4
    assert indent_width("\tx") == 4
    assert indent_width("  \tx") == 4
    assert indent_width("\t\t  x") == 10
    assert indent_width("") == 0


def test_enclosing_headers_are_innermost_first_and_skip_blank_lines() -> None:
    source = b"class A:\n    def f(self):\n        for x in y:\n\n            pass\n            "
    line_start = source.rindex(b"\n") + 1
    headers = enclosing_headers(source, line_start, 12)
    assert [(h.word, h.indent) for h in headers] == [("for", 8), ("def", 4), ("class", 0)]


@pytest.mark.parametrize("source", [b"", b"\n", b"\xff\xfe bad utf-8 (", b"x = '", b"/*", b'"""'])
def test_fallback_never_raises_on_odd_input(source: bytes) -> None:
    for offset in range(len(source) + 1):
        assert isinstance(classify_by_indentation(source, offset), SyntaxContext)


# The languageIds with a grammar (syntax/languages.py), and one without.
LANGUAGES = ["c", "cpp", "go", "java", "javascript", "javascriptreact", "lua", "python", "rust",
             "typescript", "typescriptreact"]
CODE_ALPHABET = st.sampled_from(list("abcdef(){}[]<>\"'`#/*:;,.=+-|\\ \t\n") + ["def ", "fn ", "import ", "if "])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.lists(CODE_ALPHABET, max_size=60).map("".join),
    language=st.sampled_from(LANGUAGES),
    data=st.data(),
)
def test_classify_never_raises_on_arbitrary_text(text: str, language: str, data: st.DataObject) -> None:
    source = text.encode("utf-8")
    offset = data.draw(st.integers(0, len(source)))
    parser = make_parser(language)
    tree = parser.parse(source) if parser is not None else None
    ctx = classify(tree, source, offset, language)
    assert isinstance(ctx.kind, K)
    assert ctx.block_indent >= -1 and ctx.line_indent >= 0
    assert ctx.line_prefix + ctx.line_suffix == text.split("\n")[text[:offset].count("\n")].rstrip("\r")
