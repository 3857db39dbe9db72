"""What `classify` answers: the kind of place the cursor is in, and the facts about it that
the policy and the stop rules read. Plain data: `context` (the tree) and `indent` (text
alone) both build it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ContextKind(StrEnum):
    IMPORT = "import"
    SIGNATURE = "signature"
    DECORATOR = "decorator"
    CALL_ARGS = "call_args"
    COLLECTION = "collection"
    STRING = "string"
    DOCSTRING = "docstring"
    COMMENT = "comment"
    SIMPLE_BODY = "simple_body"
    COMPLEX_BODY = "complex_body"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class SyntaxContext:
    kind: ContextKind
    language: str  # canonical language id
    line_indent: int  # columns of the cursor line's indentation
    block_indent: int  # columns of the enclosing block's header line; -1 at top level
    line_prefix: str  # the cursor line before the cursor
    line_suffix: str  # the cursor line after the cursor
    at_line_start: bool  # nothing but whitespace before the cursor on its line
    node_type: str  # innermost named node at the cursor (for logs and debugging)
    control_depth: int = 0  # enclosing if/for/while/match/switch inside the function
    op_density: float = 0.0  # binary operators per line near the cursor
