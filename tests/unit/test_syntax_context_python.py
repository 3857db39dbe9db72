import pytest

from lsp_server.syntax.context import classify
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import Case, check, classify_marked, split_cursor

CASES = [
    Case("import name being typed", "import os, sy|\n\nx = 1\n", K.IMPORT),
    Case("import after a dot", "import os.|\n\nx = 1\n", K.IMPORT, mid_typing=True),
    Case("from-import name", "from collections import Ord|\n\ndef f(:\n", K.IMPORT, mid_typing=True),
    Case("unclosed parenthesised import", """
        from typing import (
            Any,
            |
        """, K.IMPORT, mid_typing=True),
    Case("half-typed def loses its parameters", "import os\n\ndef foo(a, b|\n", K.SIGNATURE, mid_typing=True),
    Case("return annotation being typed", "def f(a: int) -> |\n", K.SIGNATURE, mid_typing=True),
    Case("decorator name being typed", "@app.rou|\ndef index():\n    pass\n", K.DECORATOR),
    Case("decorator with an unterminated string", '@app.route("/us|\ndef index():\n    pass\n', K.DECORATOR,
         mid_typing=True),
    Case("unclosed list", "x = [1, 2, |\n", K.COLLECTION, mid_typing=True),
    Case("unclosed tuple", "point = (1, |\n", K.COLLECTION, mid_typing=True),
    Case("unclosed call in a body", """
        def f(a):
            print(a, |
            return a
        """, K.CALL_ARGS, mid_typing=True, block_indent=0),
    Case("unterminated string", """
        def f():
            x = "abc|
            return x
        """, K.STRING, mid_typing=True),
    Case("docstring opened after a def", '''
        def area(r):
            """|
        ''', K.DOCSTRING, mid_typing=True, block_indent=0),
    Case("unterminated multi-line docstring", '''
        def f(a):
            """Sum of
            the |
        ''', K.DOCSTRING, mid_typing=True),
    Case("unterminated module docstring", '"""Tools for |\n', K.DOCSTRING, mid_typing=True),
    Case("inside a closed docstring", '''
        def f(a):
            """Sum of
            the |
            """
            return a
        ''', K.DOCSTRING),
    Case("docstring opened many lines above the cursor", '''
        def get_lib(prefix=None):
            """Return the directory containing the library.

            If 'plat_specific' is true, return the directory
            containing platform-specific modules, i.e. any module
            from a non-pure-Python module distribution.

            |
            """
            return prefix
        ''', K.DOCSTRING),
    Case("indented prose in a class docstring is not a block header", '''
        class FileList:
            """A list of files.

            Instance attributes:
              dir
                |
            """
            def __init__(self):
                self.files = []
        ''', K.DOCSTRING),
    Case("triple-quoted string that is not a docstring", "s = '''abc\ndef |\n", K.STRING, mid_typing=True),
    Case("comment in a body", """
        def f(a):
            # double the |
            return 2 * a
        """, K.COMMENT),
    Case("trailing comment", "x = 1  # the |\n", K.COMMENT),
    Case("closed call", "print(a, |)\n", K.CALL_ARGS),
    Case("multi-line dict, new entry line", """
        X = {
            "a": 1,
            |
        }
        """, K.COLLECTION, block_indent=0),
    Case("assignments in __init__", """
        class Point:
            def __init__(self, x, y):
                self.x = x
                |
        """, K.SIMPLE_BODY, block_indent=4),
    Case("class attributes", """
        class Config:
            host: str = "localhost"
            port: int = 8080
            |
        """, K.SIMPLE_BODY, block_indent=0),
    Case("nested loops", """
        def f(grid):
            for row in grid:
                for x in row:
                    |
        """, K.COMPLEX_BODY, block_indent=8),
    Case("arithmetic-heavy lines", """
        def roots(a, b, c):
            d = b * b - 4 * a * c
            r = (-b + d ** 0.5) / (2 * a)
            |
        """, K.COMPLEX_BODY, block_indent=0),
    Case("blank line between top-level definitions", "import os\n\n|\n\ndef f():\n    pass\n", K.UNKNOWN,
         block_indent=-1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_python_cursor_context(case: Case) -> None:
    check("python", case)


def test_line_geometry_is_reported_around_the_cursor() -> None:
    ctx = classify_marked("python", "def f(a):\n    return g(a|, 1)\n")
    assert ctx.line_prefix == "    return g(a"
    assert ctx.line_suffix == ", 1)"
    assert ctx.line_indent == 4
    assert ctx.block_indent == 0
    assert not ctx.at_line_start
    assert ctx.language == "python"
    assert ctx.node_type == "identifier"


def test_blank_line_in_body_is_at_line_start_with_the_typed_indent() -> None:
    ctx = classify_marked("py", "def f(a):\n    x = a\n    |\n")
    assert ctx.at_line_start
    assert ctx.line_indent == 4
    assert ctx.language == "python"  # aliases are canonicalised


def test_control_depth_counts_enclosing_branches_and_loops_inside_the_function() -> None:
    ctx = classify_marked("python", """
        def f(xs):
            for x in xs:
                if x:
                    while x:
                        |
        """)
    assert ctx.control_depth == 3
    assert ctx.kind == K.COMPLEX_BODY


def test_closed_string_before_cursor_does_not_count() -> None:
    assert classify_marked("python", 'def f():\n    x = "abc"|\n').kind == K.SIMPLE_BODY


def test_offset_past_the_end_is_clamped() -> None:
    source = b"import os\n"
    ctx = classify(make_parser("python").parse(source), source, 999, "python")
    assert ctx.kind == K.UNKNOWN and ctx.at_line_start


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_crlf_line_endings_give_the_same_context(case: Case) -> None:
    source, offset = split_cursor(case.source)
    crlf, crlf_offset = source.replace(b"\n", b"\r\n"), offset + source[:offset].count(b"\n")
    parser = make_parser("python")
    lf_ctx = classify(parser.parse(source), source, offset, "python")
    crlf_ctx = classify(parser.parse(crlf), crlf, crlf_offset, "python")
    assert (crlf_ctx.kind, crlf_ctx.block_indent, crlf_ctx.line_suffix) == (
        lf_ctx.kind, lf_ctx.block_indent, lf_ctx.line_suffix)
