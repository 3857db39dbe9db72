"""Open documents: text per URI, kept in sync with the client, plus a tree-sitter tree.

Three coordinate systems meet here:
- LSP positions: (line, character), lines end at \\n, \\r\\n or \\r, and `character` counts
  units of the negotiated encoding (UTF-16 by default, UTF-8 for Neovim, UTF-32 = code points).
- Python str indices (code points): what the rest of the server slices with.
- tree-sitter: UTF-8 byte offsets and (row, column-in-bytes) points, where a row ends only
  at \\n. A lone \\r is an LSP line break but not a tree-sitter one, so LSP lines and
  tree-sitter rows are computed separately and never mixed.

The pure helpers take plain ints and tuples; `Document` and `DocumentStore` accept
lsprotocol objects too (anything with `.start.line` / `.range` / `.text`), so the server
can pass its params straight through. Nothing here imports pygls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterable, Literal

from tree_sitter import Parser, Tree

from lsp_server.syntax.languages import make_parser

PositionEncoding = Literal["utf-8", "utf-16", "utf-32"]
Position = tuple[int, int]  # (line, character) in the client's encoding
Span = tuple[Position, Position]  # (start, end) of an LSP range
Point = tuple[int, int]  # tree-sitter (row, column in bytes)

_EOL = re.compile(r"\r\n|\r|\n")


# --- encoding units ----------------------------------------------------------------------


def utf8(text: str) -> bytes:
    """UTF-8 bytes of `text`. JSON can carry lone surrogates; pass them through rather than
    crash, so str indices and byte offsets stay consistent (tree-sitter tolerates them)."""
    return text.encode("utf-8", "surrogatepass")


def _char_units(ch: str, encoding: str) -> int:
    code = ord(ch)
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    return 1


def units(text: str, encoding: PositionEncoding) -> int:
    """Length of `text` in code units of `encoding`."""
    if encoding == "utf-32" or text.isascii():
        return len(text)
    if encoding == "utf-16":
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    return len(utf8(text))


def _index_for_units(line_text: str, character: int, encoding: str) -> int:
    """str index in `line_text` at `character` code units; past the end means the end, and a
    position inside a character (half a surrogate pair) rounds down to that character."""
    if encoding == "utf-32" or line_text.isascii():
        return min(character, len(line_text))
    used = 0
    for index, ch in enumerate(line_text):
        used += _char_units(ch, encoding)
        if used > character:
            return index
    return len(line_text)


# --- LSP positions <-> str indices -----------------------------------------------------


def line_bounds_from(text: str, start: int) -> tuple[int, int]:
    """(start, end) of the line content beginning at str index `start`."""
    eol = _EOL.search(text, start)
    return start, eol.start() if eol else len(text)


def line_bounds(text: str, line: int) -> tuple[int, int]:
    """(start, end) str indices of the content of `line`, its line break excluded.
    A line past the last one is the empty line at the end of the text."""
    if line <= 0:
        return line_bounds_from(text, 0)
    eol = next(islice(_EOL.finditer(text), line - 1, None), None)
    if eol is None:
        return len(text), len(text)
    return line_bounds_from(text, eol.end())


def position_to_offset(
    text: str, line: int, character: int, encoding: PositionEncoding = "utf-16"
) -> int:
    """str index of an LSP position, clamped like editors clamp: a character past the line
    end means the line end (before its line break), a line past the last means the end of
    the text, negatives mean 0."""
    if line < 0:
        return 0
    start, end = line_bounds(text, line)
    return start + _index_for_units(text[start:end], max(character, 0), encoding)


def exact_offset(text: str, line: int, character: int, encoding: PositionEncoding = "utf-16") -> int | None:
    """str index of an LSP position that lies inside `text` (its very end included) on a
    character boundary; None for anything else. Edits are checked with this, not clamped:
    a client that sends a range past our text or inside a character has a different buffer."""
    if line < 0 or character < 0:
        return None
    if line == 0:
        start = 0
    else:
        eol = next(islice(_EOL.finditer(text), line - 1, None), None)
        if eol is None:
            return None
        start = eol.end()
    _, end = line_bounds_from(text, start)
    line_text = text[start:end]
    if encoding == "utf-32" or line_text.isascii():
        return start + character if character <= len(line_text) else None
    used = 0
    for index, ch in enumerate(line_text):
        if used == character:
            return start + index
        used += _char_units(ch, encoding)
        if used > character:
            return None  # half a surrogate pair, or inside a UTF-8 sequence
    return start + len(line_text) if used == character else None


def offset_to_position(text: str, offset: int, encoding: PositionEncoding = "utf-16") -> Position:
    """LSP position of a str index (clamped into the text). An index between the \\r and \\n of
    one line break maps to the end of that line."""
    offset = min(max(offset, 0), len(text))
    line, line_start = 0, 0
    for eol in _EOL.finditer(text):
        if eol.end() > offset:  # past the offset, or a \r\n that the offset splits
            break
        line, line_start = line + 1, eol.end()
    _, line_end = line_bounds_from(text, line_start)
    return line, units(text[line_start:min(offset, line_end)], encoding)


# --- str indices <-> tree-sitter bytes and points ------------------------------------


def byte_offset(text: str, offset: int) -> int:
    """UTF-8 byte offset of str index `offset`."""
    return len(utf8(text[:offset]))


def byte_point(source: bytes, offset: int) -> Point:
    """tree-sitter point of a byte offset: rows end at b"\\n" only, columns count bytes."""
    row = source.count(b"\n", 0, offset)
    return row, offset - (source.rfind(b"\n", 0, offset) + 1)


def advance_point(start: Point, inserted: bytes) -> Point:
    """The point just after `inserted` when it is written at `start`."""
    newlines = inserted.count(b"\n")
    if newlines == 0:
        return start[0], start[1] + len(inserted)
    return start[0] + newlines, len(inserted) - (inserted.rfind(b"\n") + 1)


@dataclass(frozen=True)
class ByteEdit:
    """One edit in tree-sitter's terms, as given to `Tree.edit`."""

    start_byte: int
    old_end_byte: int
    new_end_byte: int
    start_point: Point
    old_end_point: Point
    new_end_point: Point


def byte_edit(text: str, source: bytes, start: int, end: int, new_text: str) -> ByteEdit:
    """Describe replacing str slice [start, end) of `text` (whose UTF-8 is `source`)."""
    start_byte = byte_offset(text, start)
    old_end_byte = start_byte + len(utf8(text[start:end]))
    start_point = byte_point(source, start_byte)
    inserted = utf8(new_text)
    return ByteEdit(
        start_byte=start_byte,
        old_end_byte=old_end_byte,
        new_end_byte=start_byte + len(inserted),
        start_point=start_point,
        old_end_point=byte_point(source, old_end_byte),
        new_end_point=advance_point(start_point, inserted),
    )


# --- changes ---------------------------------------------------------------------------


def as_span(range_: Any) -> Span:
    """An LSP range as plain tuples; accepts lsprotocol `Range` or ((l, c), (l, c))."""
    if hasattr(range_, "start"):
        return (range_.start.line, range_.start.character), (range_.end.line, range_.end.character)
    (start_line, start_char), (end_line, end_char) = range_
    return (int(start_line), int(start_char)), (int(end_line), int(end_char))


@dataclass(frozen=True)
class TextChange:
    """One content change of didChange: `span` None replaces the whole document."""

    span: Span | None
    text: str

    @classmethod
    def coerce(cls, change: Any) -> TextChange:
        """From lsprotocol content-change objects, (range | None, text) tuples, or itself."""
        if isinstance(change, TextChange):
            return change
        if isinstance(change, tuple):
            range_, text = change
        else:
            range_, text = getattr(change, "range", None), change.text
        if not isinstance(text, str):
            raise TypeError(f"change text must be str, not {type(text).__name__}")
        return cls(None if range_ is None else as_span(range_), text)


@dataclass
class Document:
    """One open document. `source` is always `utf8(text)`; `tree` is None without a grammar."""

    uri: str
    language_id: str
    version: int
    text: str = field(repr=False)
    parser: Parser | None = field(default=None, repr=False)
    source: bytes = field(init=False, repr=False)
    tree: Tree | None = field(init=False, default=None, repr=False)
    # Why the text cannot be trusted (out of sync, too large), None when it can: no
    # completions until a didOpen or a full-text change brings it back.
    problem: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.source = utf8(self.text)
        self.tree = self.parser.parse(self.source) if self.parser else None

    def apply_change(
        self, range_: Any, text: str, encoding: PositionEncoding = "utf-16"
    ) -> ByteEdit | None:
        """Apply one content change; returns the byte edit (None for a full replace)."""
        if range_ is None:
            self.text, self.source = text, utf8(text)
            self.tree = self.parser.parse(self.source) if self.parser else None
            return None
        (start_line, start_char), (end_line, end_char) = as_span(range_)
        # 1. Both ends are positions in the text *before* this change.
        start = position_to_offset(self.text, start_line, start_char, encoding)
        end = position_to_offset(self.text, end_line, end_char, encoding)
        start, end = min(start, end), max(start, end)
        # 2. The same edit in bytes and points, measured on the old text.
        edit = byte_edit(self.text, self.source, start, end, text)
        # 3. New text and bytes, sliced in step.
        self.text = self.text[:start] + text + self.text[end:]
        self.source = (
            self.source[: edit.start_byte] + utf8(text) + self.source[edit.old_end_byte :]
        )
        # 4. Tell the old tree what moved, then re-parse reusing its unchanged parts.
        if self.parser is not None and self.tree is not None:
            self.tree.edit(
                start_byte=edit.start_byte,
                old_end_byte=edit.old_end_byte,
                new_end_byte=edit.new_end_byte,
                start_point=edit.start_point,
                old_end_point=edit.old_end_point,
                new_end_point=edit.new_end_point,
            )
            self.tree = self.parser.parse(self.source, self.tree)
        return edit

    def offset_at(self, line: int, character: int, encoding: PositionEncoding = "utf-16") -> int:
        """str index of a (clamped) LSP position."""
        return position_to_offset(self.text, line, character, encoding)

    def cursor_byte_offset(
        self, line: int, character: int, encoding: PositionEncoding = "utf-16"
    ) -> int:
        """UTF-8 byte offset of a (clamped) LSP position: what tree-sitter queries want."""
        return byte_offset(self.text, self.offset_at(line, character, encoding))

    def prefix_suffix(
        self, line: int, character: int, encoding: PositionEncoding = "utf-16"
    ) -> tuple[str, str]:
        """The text before and after the cursor."""
        offset = self.offset_at(line, character, encoding)
        return self.text[:offset], self.text[offset:]


@dataclass(frozen=True)
class ChangeOutcome:
    """What `DocumentStore.change` did. `error`: nothing was applied. `warning`: applied,
    but something looked wrong (a version that did not increase)."""

    document: Document | None
    warning: str | None = None
    error: str | None = None
    problem: str | None = None  # this change made the document untrustworthy (see Document)

    @property
    def ok(self) -> bool:
        return self.error is None


class DocumentStore:
    """Open documents by URI. Never raises on client mistakes; reports them instead."""

    # Closed documents that were edited stay around, newest last, for cross-file context.
    KEEP_CLOSED = 8

    def __init__(self, parser_factory: Callable[[str], Parser | None] = make_parser,
                 max_bytes: int = 8 * 2**20) -> None:
        self._parser_factory = parser_factory
        self._documents: dict[str, Document] = {}
        self.max_bytes = max_bytes
        self._touched: dict[str, int] = {}  # uri -> clock of its last open or edit
        self._edited: set[str] = set()
        self._closed: dict[str, Document] = {}
        self._clock = 0

    def _too_large(self, size: int) -> str:
        return f"larger than the limit of {self.max_bytes / 2**20:g} MB ({size / 2**20:.1f} MB)"

    def _touch(self, uri: str) -> None:
        self._clock += 1
        self._touched[uri] = self._clock

    def open(self, uri: str, language_id: str, version: int, text: str) -> Document:
        """didOpen. Re-opening a URI replaces its document. A document over `max_bytes` is
        kept empty, with its `problem` saying so."""
        size = len(utf8(text))
        too_large = size > self.max_bytes
        document = Document(uri, language_id, version, "" if too_large else text,
                            None if too_large else self._parser_factory(language_id))
        if too_large:
            document.problem = self._too_large(size)
        self._documents[uri] = document
        self._closed.pop(uri, None)
        self._touch(uri)
        return document

    def detached(self, document: Document, offset: int, insert: str) -> Document:
        """A copy of `document` with `insert` at str index `offset`, not stored: what the
        document will be if the user accepts a completion there."""
        text = document.text[:offset] + insert + document.text[offset:]
        return Document(document.uri, document.language_id, document.version, text,
                        self._parser_factory(document.language_id))

    def opened(self, language_id: str, exclude: str) -> list[Document]:
        """Open documents of one language in the order they were opened, oldest first."""
        return [d for uri, d in self._documents.items() if uri != exclude and d.language_id == language_id]

    def recent(self, language_id: str, exclude: str, limit: int = 20) -> list[Document]:
        """Open and recently closed-after-editing documents of one language, newest first."""
        pool = {**self._closed, **self._documents}
        docs = [d for uri, d in pool.items() if uri != exclude and d.language_id == language_id]
        docs.sort(key=lambda d: -self._touched.get(d.uri, 0))
        return docs[:limit]

    def change(
        self,
        uri: str,
        version: int | None,
        changes: Iterable[Any],
        encoding: PositionEncoding = "utf-16",
    ) -> ChangeOutcome:
        """didChange: apply the content changes in order, each against the text the previous
        one produced (that is what the spec says the client sends)."""
        document = self._documents.get(uri)
        if document is None:
            return ChangeOutcome(
                None, error=f"didChange for {uri}, which is not open: ignored; reopen the file."
            )
        try:
            parsed = [TextChange.coerce(change) for change in changes]
        except (TypeError, ValueError, AttributeError) as exc:
            return ChangeOutcome(
                document, error=f"didChange for {uri} is malformed ({exc}): ignored."
            )
        warning = None
        if version is not None and version <= document.version:
            # Applied anyway: the client's changes describe its own buffer, so skipping them
            # would desynchronise us for good; a version number is only bookkeeping.
            warning = (
                f"didChange for {uri} has version {version}, not newer than {document.version}; "
                "applied anyway."
            )
        problem = self._apply(document, parsed, encoding)
        self._touch(uri)
        self._edited.add(uri)
        if version is not None:
            document.version = version
        return ChangeOutcome(document, warning=warning, problem=problem)

    def _apply(self, document: Document, changes: list[TextChange], encoding: PositionEncoding
               ) -> str | None:
        """Apply what can be trusted; returns the problem this call introduced, if any."""
        introduced = None
        for change in changes:
            if change.span is None:  # a full text: back in sync, if it fits
                size = len(utf8(change.text))
                if size > self.max_bytes:
                    document.apply_change(None, "")
                    document.problem = introduced = self._too_large(size)
                else:
                    document.apply_change(None, change.text)
                    document.problem = None
                continue
            if document.problem is not None:
                continue  # nothing to apply an edit to until a full text arrives
            (start_line, start_char), (end_line, end_char) = change.span
            start = exact_offset(document.text, start_line, start_char, encoding)
            end = exact_offset(document.text, end_line, end_char, encoding)
            if start is None or end is None or start > end:
                what = "reversed" if start is not None and end is not None else "outside the text"
                document.problem = introduced = (
                    f"out of sync: an edit range {change.span} is {what} "
                    f"({document.text.count(chr(10)) + 1} lines)")
                continue
            document.apply_change(change.span, change.text, encoding)
            if len(document.source) > self.max_bytes:
                size = len(document.source)
                document.apply_change(None, "")
                document.problem = introduced = self._too_large(size)
        return introduced

    def close(self, uri: str) -> bool:
        """didClose; False when the URI was not open."""
        document = self._documents.pop(uri, None)
        if document is not None and uri in self._edited:
            self._closed[uri] = document
            while len(self._closed) > self.KEEP_CLOSED:
                self._closed.pop(next(iter(self._closed)))
        self._edited.discard(uri)
        return document is not None

    def get(self, uri: str) -> Document | None:
        return self._documents.get(uri)

    def __contains__(self, uri: object) -> bool:
        return uri in self._documents

    def __len__(self) -> int:
        return len(self._documents)
