"""Shared helpers for the syntax tests: sources mark the cursor with a single `|`."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from lsp_server.syntax.context import classify
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.types import ContextKind, SyntaxContext

CURSOR = "|"


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # exactly one `|` marks the cursor; dedented before use
    kind: ContextKind
    mid_typing: bool = False  # the buffer does not parse cleanly (the usual state while typing)
    block_indent: int | None = None  # checked when given


def split_cursor(marked: str) -> tuple[bytes, int]:
    """Source bytes without the marker, and the cursor's byte offset."""
    marked = textwrap.dedent(marked).lstrip("\n")
    assert marked.count(CURSOR) == 1, f"mark the cursor with exactly one {CURSOR!r}: {marked!r}"
    before, after = marked.split(CURSOR)
    return (before + after).encode("utf-8"), len(before.encode("utf-8"))


def classify_marked(language: str, marked: str) -> SyntaxContext:
    source, offset = split_cursor(marked)
    parser = make_parser(language)
    tree = parser.parse(source) if parser is not None else None
    return classify(tree, source, offset, language)


def check(language: str, case: Case) -> None:
    ctx = classify_marked(language, case.source)
    assert ctx.kind == case.kind, f"{case.name}: got {ctx.kind.value} ({ctx})"
    if case.block_indent is not None:
        assert ctx.block_indent == case.block_indent, f"{case.name}: block_indent {ctx.block_indent}"
    if case.mid_typing:
        source, _ = split_cursor(case.source)
        parser = make_parser(language)
        assert parser is not None and parser.parse(source).root_node.has_error, (
            f"{case.name}: marked mid-typing but parses cleanly")
