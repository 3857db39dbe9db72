"""Fill-in-the-middle spots grouped by what the code at the cursor IS, for `bench policy`.

Spots are cut from the Python standard library's own sources. The label comes from the
source's structure (tree-sitter node types of the original file), never from
`syntax.context.classify()`; the classifier's kind for the edited document is recorded
next to it so the benchmark can report how often the two agree.

Every spot removes a span of one original file: the cursor sits where the span began,
`expected` is what was removed, and `prefix` / `suffix` are the whole document around it.
Line spans start after the first line's indentation and end before the last line's line
break, so the suffix starts with that line break, as if the lines had been emptied.
"""

from __future__ import annotations

import random
import re
import sysconfig
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tree_sitter import Node

from lsp_server.syntax.context import classify
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.types import SyntaxContext

CLASSES = ("imports", "signatures", "literals", "members", "simple", "complex", "docstrings")
# Predictable code the policy should speculate hard on, and prose it should not.
BOILERPLATE = ("imports", "signatures", "literals", "members")
HIGH_ENTROPY = "docstrings"
# classify()'s kinds that count as agreeing with each label.
AGREEING_KINDS: dict[str, frozenset[str]] = {
    "imports": frozenset({"import"}),
    "signatures": frozenset({"signature"}),
    "literals": frozenset({"collection"}),
    "members": frozenset({"simple_body"}),
    "simple": frozenset({"simple_body"}),
    "complex": frozenset({"complex_body"}),
    "docstrings": frozenset({"docstring"}),
}

SPAN_LINES = 3  # most lines removed from a run (imports, elements, members, statements)
PROSE_LINES = 4  # most docstring lines removed
MIN_EXPECTED_CHARS = 6
MAX_EXPECTED_CHARS = 600
# Generated codec tables: dozens of near-identical files would crowd out real code.
SKIPPED_DIRS = ("encodings",)

_LOOPS_AND_IFS = frozenset({"for_statement", "while_statement", "if_statement"})
_COMPOUND = frozenset(
    {"for_statement", "while_statement", "if_statement", "try_statement", "with_statement",
     "match_statement", "function_definition", "class_definition", "decorated_definition"})
_ARITHMETIC = frozenset({"+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^"})
_LITERALS = frozenset({"dictionary", "list", "set"})


@dataclass(frozen=True)
class ClassSpot:
    name: str  # file:line of the cursor in the original source
    label: str  # one of CLASSES, from the source's structure
    prefix: str
    suffix: str
    expected: str
    context: SyntaxContext  # classify() on the edited document at the cursor

    @property
    def classified(self) -> str:
        return self.context.kind.value

    @property
    def agrees(self) -> bool:
        return self.classified in AGREEING_KINDS[self.label]

    def to_dict(self) -> dict:
        return {"name": self.name, "label": self.label, "classified": self.classified,
                "agrees": self.agrees, "expected": self.expected}


# ---------------------------------------------------------------------------------------
# Lines of a source in bytes (tree-sitter's unit).


class _Lines:
    def __init__(self, src: bytes):
        self.src = src
        self.starts = [0] + [m.end() for m in re.finditer(b"\n", src)]

    def text(self, row: int) -> bytes:
        return self.src[self.starts[row]: self.content_end(row)]

    def content_end(self, row: int) -> int:
        """Where `row` ends, before its line break."""
        end = self.starts[row + 1] - 1 if row + 1 < len(self.starts) else len(self.src)
        return end - 1 if end > self.starts[row] and self.src[end - 1: end] == b"\r" else end

    def indent_end(self, row: int) -> int:
        line = self.text(row)
        return self.starts[row] + len(line) - len(line.lstrip(b" \t"))

    def starts_line(self, node: Node) -> bool:
        return self.indent_end(node.start_point.row) == node.start_byte

    def span(self, first: int, last: int) -> tuple[int, int]:
        """Rows first..last, after the first one's indentation, before the last's break."""
        return self.indent_end(first), self.content_end(last)


# ---------------------------------------------------------------------------------------
# Candidate spans per label, as (start byte, end byte) in the original source.


def _walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _run(first: Node, same: Callable[[Node], bool]) -> list[Node]:
    """`first` and the named siblings after it that pass `same`, each one line, on
    consecutive lines, at most SPAN_LINES of them."""
    run = [first]
    node = first.next_named_sibling
    while (len(run) < SPAN_LINES and node is not None and same(node)
           and node.start_point.row == node.end_point.row == run[-1].end_point.row + 1):
        run.append(node)
        node = node.next_named_sibling
    return run


def _is_import(node: Node) -> bool:
    return node.type in ("import_statement", "import_from_statement") and (
        node.start_point.row == node.end_point.row)


def _import_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """After the keyword (`import ` / `from `) of an import line, through up to
    SPAN_LINES consecutive import lines."""
    for node in nodes:
        if _is_import(node) and lines.starts_line(node):
            keyword = node.children[0]
            run = _run(node, _is_import)
            yield keyword.end_byte + 1, lines.content_end(run[-1].end_point.row)


def _signature_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """After `def `, through the header's colon."""
    for node in nodes:
        if node.type != "function_definition":
            continue
        name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
        colon = body.prev_sibling if body is not None else None
        if name is None or colon is None or colon.type != ":":
            continue
        if colon.end_point.row - name.start_point.row < 4:
            yield name.start_byte, colon.end_byte


def _literal_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """Whole element lines inside a multi-line dict/list/set literal with at least 4
    elements: from a line that starts with an element, up to SPAN_LINES lines, never
    splitting an element and never touching the bracket lines."""
    for node in nodes:
        if node.type not in _LITERALS:
            continue
        elements = [c for c in node.named_children if c.type != "comment"]
        top, bottom = node.start_point.row, node.end_point.row
        if len(elements) < 4 or bottom - top < 3:
            continue
        for element in elements[1:]:
            first = element.start_point.row
            if not (top < first < bottom and lines.starts_line(element)):
                continue
            last = _whole_element_rows(elements, first, min(first + SPAN_LINES - 1, bottom - 1))
            if last is not None:
                yield lines.span(first, last)


def _whole_element_rows(elements: list[Node], first: int, last: int) -> int | None:
    """The largest row <= `last` such that rows first..row cut no element in two."""
    for row in range(last, first - 1, -1):
        if all(e.end_point.row <= row or e.start_point.row > row
               for e in elements if e.start_point.row >= first):
            return row
    return None


def _is_member(node: Node, owner: str) -> bool:
    """A one-line assignment to a plain name (class body) or to `self.x` (`__init__`)."""
    if node.type != "expression_statement" or node.named_child_count != 1:
        return False
    assignment = node.named_children[0]
    if assignment.type != "assignment":
        return False
    left = assignment.child_by_field_name("left")
    if left is None:
        return False
    if owner == "class":
        return left.type == "identifier"
    obj = left.child_by_field_name("object") if left.type == "attribute" else None
    return obj is not None and obj.type == "identifier" and obj.text == b"self"


def _member_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """Runs of at least 3 one-line member assignments (class fields, enum members,
    `self.x = x` in `__init__`); the cursor starts a member after the first."""
    for node in nodes:
        if node.type != "block" or node.parent is None:
            continue
        owner = node.parent
        if owner.type == "class_definition":
            kind = "class"
        elif owner.type == "function_definition" and owner.child_by_field_name("name").text == b"__init__":
            kind = "init"
        else:
            continue
        statements = node.named_children
        for i in range(1, len(statements) - 1):
            s = statements[i]
            if not (_is_member(s, kind) and _is_member(statements[i - 1], kind)
                    and _is_member(statements[i + 1], kind) and lines.starts_line(s)):
                continue
            run = _run(s, lambda n: _is_member(n, kind))
            if len(run) >= 2:
                yield lines.span(s.start_point.row, run[-1].end_point.row)


def _docstring(block: Node) -> Node | None:
    first = block.named_children[0] if block.named_child_count else None
    if first is not None and first.type == "expression_statement" and first.named_child_count == 1:
        string = first.named_children[0]
        if string.type == "string":
            return first
    return None


def _has_arithmetic(node: Node) -> bool:
    return any(n.type == "augmented_assignment" or (n.type == "binary_operator" and any(
        c.type in _ARITHMETIC for c in n.children)) for n in _walk(node))


def _simple_body_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """A whole short function body (after its docstring): 1..5 statements on at most 6
    lines, no loops, branches or nested definitions, at most one arithmetic operator."""
    for node in nodes:
        body = node.child_by_field_name("body") if node.type == "function_definition" else None
        if body is None or body.start_point.row == node.start_point.row:
            continue
        statements = body.named_children[1:] if _docstring(body) else body.named_children
        statements = [s for s in statements if s.type != "comment"]
        if not 1 <= len(statements) <= 5 or not lines.starts_line(statements[0]):
            continue
        first, last = statements[0].start_point.row, body.end_point.row
        inner = [n for s in statements for n in _walk(s)]
        ops = sum(n.type in ("binary_operator", "augmented_assignment") for n in inner)
        if last - first < 6 and ops <= 1 and not any(n.type in _COMPOUND for n in inner):
            yield lines.span(first, last)


def _control_depth(node: Node) -> int:
    """Loops and ifs around `node` inside its function."""
    depth, parent = 0, node.parent
    while parent is not None and parent.type != "function_definition":
        depth += parent.type in _LOOPS_AND_IFS
        parent = parent.parent
    return depth if parent is not None else 0


def _complex_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """Statements with arithmetic inside at least two nested loops/ifs of a function:
    the statement and up to SPAN_LINES - 1 following siblings, on at most 4 lines."""
    for node in nodes:
        if node.type != "block" or node.parent is None:
            continue
        for s in node.named_children:
            if (s.type == "comment" or s.type in _COMPOUND or not lines.starts_line(s)
                    or _control_depth(s) < 2 or not _has_arithmetic(s)):
                continue
            run = [s]
            nxt = s.next_named_sibling
            while (len(run) < SPAN_LINES and nxt is not None and nxt.type != "comment"
                   and nxt.end_point.row - s.start_point.row < 4):
                run.append(nxt)
                nxt = nxt.next_named_sibling
            if run[-1].end_point.row - s.start_point.row < 4:
                yield lines.span(s.start_point.row, run[-1].end_point.row)


def _is_prose(line: bytes) -> bool:
    text = line.decode("utf-8", "replace").strip()
    letters = sum(ch.isalpha() for ch in text)
    return (len(text.split()) >= 5 and letters >= 0.7 * len(text.replace(" ", ""))
            and not text.startswith((">>>", "...", ":")))


def _docstring_spans(nodes: list[Node], lines: _Lines) -> Iterator[tuple[int, int]]:
    """A paragraph of prose lines (not the first line) inside a module, class or function
    docstring, up to PROSE_LINES lines, never the line with the closing quotes."""
    for node in nodes:
        if node.type == "module":
            holder = _docstring(node)
        elif node.type == "block" and node.parent is not None and node.parent.type in (
                "function_definition", "class_definition"):
            holder = _docstring(node)
        else:
            continue
        if holder is None:
            continue
        top, bottom = holder.start_point.row, holder.end_point.row
        for first in range(top + 1, bottom):
            if not _is_prose(lines.text(first)) or (first > top + 1 and _is_prose(lines.text(first - 1))):
                continue  # start at a paragraph's first prose line
            last = first
            while last + 1 < min(bottom, first + PROSE_LINES) and _is_prose(lines.text(last + 1)):
                last += 1
            yield lines.span(first, last)


_FINDERS = {
    "imports": _import_spans, "signatures": _signature_spans, "literals": _literal_spans,
    "members": _member_spans, "simple": _simple_body_spans, "complex": _complex_spans,
    "docstrings": _docstring_spans,
}


# ---------------------------------------------------------------------------------------
# Spots.


def candidate_spans(source: str, labels: Sequence[str] = CLASSES) -> dict[str, list[tuple[int, int]]]:
    """Every usable span per label in one source, in source order, without duplicates."""
    src = source.encode("utf-8")
    nodes = list(_walk(make_parser("python").parse(src).root_node))
    lines = _Lines(src)
    spans: dict[str, list[tuple[int, int]]] = {}
    for label in labels:
        found = {(a, b) for a, b in _FINDERS[label](nodes, lines)
                 if MIN_EXPECTED_CHARS <= len(src[a:b].strip()) <= MAX_EXPECTED_CHARS}
        spans[label] = sorted(found)
    return spans


class _Source:
    """One file's text as bytes, cut into spots."""

    def __init__(self, source: str, name: str):
        self.src = source.encode("utf-8")
        self.name = name
        self.line_starts = _Lines(self.src).starts

    def spot(self, start: int, end: int, label: str) -> ClassSpot:
        src = self.src
        prefix, expected, suffix = src[:start], src[start:end], src[end:]
        document = prefix + suffix
        context = classify(make_parser("python").parse(document), document, len(prefix), "python")
        row = bisect_right(self.line_starts, start) - 1
        return ClassSpot(f"{self.name}:{row + 1}", label, prefix.decode("utf-8", "replace"),
                         suffix.decode("utf-8", "replace"), expected.decode("utf-8", "replace"), context)


def spots_in_source(source: str, name: str, labels: Sequence[str] = CLASSES) -> dict[str, list[ClassSpot]]:
    """Every candidate spot per label in one source."""
    file = _Source(source, name)
    return {label: [file.spot(a, b, label) for a, b in spans]
            for label, spans in candidate_spans(source, labels).items()}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def build_prompt_set(
    per_class: int, classes: Sequence[str] = CLASSES, seed: int = 0,
    files: Sequence[Path] | None = None, root: Path | None = None,
) -> list[ClassSpot]:
    """`per_class` spots for each class, at most one per class per file, from files in a
    seeded order (the standard library's by default; names relative to `root`).
    Deterministic for a given file list and seed. Returned grouped by class, in `classes`
    order; a class may come up short when the files hold too few spots of it."""
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise ValueError(f"unknown classes {', '.join(unknown)}: choose from {', '.join(CLASSES)}")
    if files is None:
        from lsp_server.bench.datasets import stdlib_files

        root = stdlib_root()
        files = [p for p in stdlib_files() if not set(p.relative_to(root).parts) & set(SKIPPED_DIRS)]
    rng = random.Random(seed)
    order = sorted(files)
    rng.shuffle(order)
    picked: dict[str, list[ClassSpot]] = {c: [] for c in classes}
    for path in order:
        wanted = [c for c in classes if len(picked[c]) < per_class]
        if not wanted:
            break
        source = path.read_text(encoding="utf-8", errors="replace")
        file = _Source(source, str(path.relative_to(root)) if root is not None else path.name)
        for label, spans in candidate_spans(source, wanted).items():
            if spans:
                picked[label].append(file.spot(*rng.choice(spans), label))
    return [spot for c in classes for spot in picked[c]]
