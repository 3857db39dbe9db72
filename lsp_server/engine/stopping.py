"""Where a completion ends, from the stop rule chosen before generation began.

Pure text functions: the engine calls `stop_index` after every accepted chunk and ends the
request as soon as it returns an index, so a single-line context never generates a second
line and a block ends at the dedent that closes it.
"""

from __future__ import annotations

from lsp_server.syntax.indent import indent_width  # text only: the policy's own measure of a dedent

from .types import StopRule

_OPEN, _CLOSE = "([{", ")]}"


def stop_index(text: str, rule: StopRule) -> int | None:
    """Index at which `text` must be cut, or None to keep generating."""
    if rule.kind == "line":
        return _first_newline(text)
    if rule.kind == "statement":
        return _statement_end(text)
    if rule.kind == "block":
        return _block_end(text, rule.base_indent)
    return None


def _first_newline(text: str) -> int | None:
    i = text.find("\n")
    return None if i < 0 else i


def _statement_end(text: str) -> int | None:
    depth = 0
    for i, ch in enumerate(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == "\n" and depth <= 0 and text[:i].strip():
            return i
    return None


def _block_end(text: str, base_indent: int) -> int | None:
    """Cut before the first complete non-blank line (after the first) indented at or
    below `base_indent`. A line is judged once its first non-space character arrived."""
    offset = 0
    lines = text.split("\n")
    for n, line in enumerate(lines):
        if n > 0 and line.strip() and indent_width(line) <= base_indent:
            return offset - 1  # the newline before this line
        offset += len(line) + 1
    return None
