"""Chunks of other files for a prompt: definitions of imported names, and similar windows.

Two sources, pure functions over plain text and tree-sitter trees:
- definitions: the names the current (Python) file imports, looked up in the open files
  that are those modules (relative imports resolved against the file's directory, absolute
  ones by the path ending in the module's dotted name); a class longer than a screen is
  reduced to its skeleton (header, members, method signatures).
- similar windows: the ~50-line window of each other file whose identifiers overlap most
  (Jaccard) with the code around the cursor (Copilot and Cody do the same).

`pick_chunks` fills a token budget with definitions first, then the best windows, and
returns them in a stable order (path, line), so a prompt built from them changes only when
the set changes, never because scores moved.
"""

from __future__ import annotations

import keyword
import posixpath
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tree_sitter import Node, Tree

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words every file of a language shares: they say nothing about which file is related.
_COMMON = frozenset(keyword.kwlist) | {"self", "cls", "none", "true", "false", "def", "class",
                                       "return", "import", "from", "int", "str", "len", "args",
                                       "kwargs", "this", "const", "let", "var", "function"}
WINDOW_LINES = 50
WINDOW_STEP = 25
DEFINITION_MAX_LINES = 40
# A window sharing less than this with the query is noise, not context.
MIN_SIMILARITY = 0.08

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class SourceFile:
    path: str  # absolute POSIX path (from the file URI)
    text: str
    tree: Tree | None = None  # tree-sitter tree of `text` (definitions need one)
    language: str = "python"


@dataclass(frozen=True)
class Chunk:
    path: str
    start_line: int  # 0-based line of `text` in its file
    text: str
    kind: str  # "definition" | "similar" | "outline"
    score: float = 0.0


@dataclass(frozen=True)
class Import:
    module: str  # dotted name after the dots ("" for `from . import x`)
    level: int  # leading dots: 0 absolute
    names: tuple[str, ...]  # imported names as written in the module (not aliases)


# --- similarity ------------------------------------------------------------------------


def identifiers(text: str) -> frozenset[str]:
    """The identifier words of `text`, lowercased, without keywords and ubiquitous names."""
    return frozenset(w for w in (m.group().lower() for m in _IDENT.finditer(text))
                     if len(w) > 1 and w not in _COMMON)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def windows(text: str, size: int = WINDOW_LINES, step: int = WINDOW_STEP) -> list[tuple[int, str]]:
    """(start line, text) of overlapping `size`-line windows covering `text`."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= size:
        return [(0, text)] if text.strip() else []
    starts = list(range(0, len(lines) - size + 1, step))
    if starts[-1] != len(lines) - size:
        starts.append(len(lines) - size)
    return [(s, "".join(lines[s:s + size])) for s in starts]


def best_window(query: frozenset[str], source: SourceFile) -> Chunk | None:
    best: Chunk | None = None
    for start, text in windows(source.text):
        score = jaccard(query, identifiers(text))
        if best is None or score > best.score:
            best = Chunk(source.path, start, text, "similar", score)
    return best


# --- imports and definitions (Python) ----------------------------------------------------


def _text(node: Node, source: bytes) -> str:
    return source[node.start_byte:node.end_byte].decode("utf-8", "replace")


def python_imports(tree: Tree, source: bytes) -> list[Import]:
    """Top-level `from M import a, b` statements (wildcards and plain `import M` say no names)."""
    out = []
    for node in tree.root_node.children:
        if node.type != "import_from_statement":
            continue
        module = node.child_by_field_name("module_name")
        if module is None:
            continue
        level, dotted = 0, ""
        if module.type == "relative_import":
            for part in module.children:
                if part.type == "import_prefix":
                    level = _text(part, source).count(".")
                elif part.type == "dotted_name":
                    dotted = _text(part, source)
        else:
            dotted = _text(module, source)
        names = []
        for name in node.children_by_field_name("name"):
            if name.type == "aliased_import":
                name = name.child_by_field_name("name") or name
            names.append(_text(name, source).strip())
        if names:
            out.append(Import(dotted, level, tuple(names)))
    return out


def module_paths(current: str, imp: Import) -> list[str]:
    """Candidate paths (absolute for a relative import, path tails for an absolute one)."""
    parts = [p for p in imp.module.split(".") if p]
    if imp.level:
        base = posixpath.dirname(current)
        for _ in range(imp.level - 1):
            base = posixpath.dirname(base)
        stem = posixpath.join(base, *parts) if parts else base
        return [stem + ".py", posixpath.join(stem, "__init__.py")]
    stem = "/".join(parts)
    return ["/" + stem + ".py", "/" + stem + "/__init__.py"]


def resolve_module(current: str, imp: Import, paths: Iterable[str]) -> str | None:
    """The open file that `imp` imports from, if any."""
    wanted = module_paths(current, imp)
    for path in paths:
        if path == current:
            continue
        if imp.level and path in wanted:
            return path
        if not imp.level and any(path.endswith(tail) for tail in wanted):
            return path
    return None


def _definition_name(node: Node, source: bytes) -> tuple[str | None, Node]:
    inner = node
    if node.type == "decorated_definition":
        inner = node.child_by_field_name("definition") or node
    if inner.type in ("function_definition", "class_definition"):
        name = inner.child_by_field_name("name")
        return (_text(name, source) if name else None), inner
    if node.type == "expression_statement" and node.children and node.children[0].type == "assignment":
        left = node.children[0].child_by_field_name("left")
        if left is not None and left.type == "identifier":
            return _text(left, source), node
    return None, node


def skeleton(text: str, max_lines: int = DEFINITION_MAX_LINES) -> str:
    """A long definition cut to what a caller needs: for a class its header, its members
    and its method signatures; for anything else its first `max_lines` lines."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= max_lines:
        return text
    if not lines[0].lstrip().startswith(("class ", "@")):
        return "".join(lines[:max_lines])
    body_indent = next((len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()), 4)
    kept = [lines[0]]
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if indent == body_indent and stripped and not stripped.startswith(("#", ")", "]", "}")):
            kept.append(line)
    return "".join(kept[:max_lines])


def python_definitions(tree: Tree, source: bytes, names: Iterable[str]) -> list[Chunk]:
    """Top-level definitions (functions, classes, assignments) of `names`, in file order."""
    wanted = set(names)
    out = []
    for node in tree.root_node.children:
        name, _inner = _definition_name(node, source)
        if name in wanted:
            out.append(Chunk("", node.start_point[0], skeleton(_text(node, source)), "definition"))
    return out


def imported_definitions(current: SourceFile, others: Sequence[SourceFile]) -> list[Chunk]:
    """Definitions, in the open files, of the names `current` imports from them."""
    if current.tree is None or current.language != "python":
        return []
    by_path = {o.path: o for o in others if o.tree is not None}
    source = current.text.encode("utf-8", "surrogatepass")
    out = []
    for imp in python_imports(current.tree, source):
        path = resolve_module(current.path, imp, by_path)
        if path is None:
            continue
        module = by_path[path]
        defs = python_definitions(module.tree, module.text.encode("utf-8", "surrogatepass"), imp.names)
        out.extend(Chunk(path, c.start_line, c.text, c.kind) for c in defs)
    return out


# --- a file's outline: what its code offers a caller (Python) ------------------------------

OUTLINE_LINE_CHARS = 120
_QUOTES = ('"""', "'''")


def _docstring_line(body: Node | None, source: bytes) -> str | None:
    """The first line of a body's docstring, with its quotes closed."""
    if body is None or not body.children or body.children[0].type != "expression_statement":
        return None
    first = body.children[0].children[0] if body.children[0].children else None
    if first is None or first.type != "string":
        return None
    text = _text(first, source).strip()
    quote = next((q for q in _QUOTES if text.startswith(q)), None)
    if quote is None:
        return None
    line = text[3:].strip().split("\n", 1)[0].strip()
    line = line[:-3].strip() if line.endswith(quote) else line
    return f"{quote}{line[:OUTLINE_LINE_CHARS]}{quote}" if line else None


def _assignment_line(node: Node, source: bytes) -> str:
    """An assignment on one line; one spread over several (a dict, a long string) shows
    only its target, so that no bracket or string is left open in the prompt."""
    text = _text(node, source)
    if "\n" not in text and len(text) <= OUTLINE_LINE_CHARS:
        return text
    left = node.children[0].child_by_field_name("left")
    return (_text(left, source) if left is not None else text.split("=", 1)[0].strip()) + " = ..."


def _is_assignment(node: Node) -> bool:
    return node.type == "expression_statement" and bool(node.children) \
        and node.children[0].type == "assignment"


def _definition(node: Node) -> Node | None:
    """The function or class a (decorated) definition node holds, else None."""
    inner = node.child_by_field_name("definition") if node.type == "decorated_definition" else node
    return inner if inner is not None and inner.type in ("function_definition", "class_definition") else None


def _stub(node: Node, source: bytes, indent: str) -> list[str]:
    """A function or class as stub items: its header with its docstring's first line, then
    for a class its assignments and its methods' stubs, one level in (an item a member, so
    a budget can end between them)."""
    inner = _definition(node)
    body = inner.child_by_field_name("body") if inner is not None else None
    if inner is None or body is None:
        return []
    # Up to the colon before the body: comments between them are not the signature.
    colons = [c for c in inner.children if c.type == ":" and c.end_byte <= body.start_byte]
    end = colons[-1].end_byte if colons else body.start_byte
    header = source[node.start_byte:end].decode("utf-8", "replace").rstrip()
    inside = indent + "    "
    doc = _docstring_line(body, source)
    members: list[str] = []
    if inner.type == "class_definition":
        for child in body.children:
            if _definition(child) is not None:
                members += _stub(child, source, inside)
            elif _is_assignment(child):
                members.append(inside + _assignment_line(child, source))
    # The header's lines after the first keep their own indentation.
    first = indent + header + ("\n" + inside + doc if doc else "")
    return [first + ("" if doc or members else "\n" + inside + "..."), *members]


def python_outline(tree: Tree, source: bytes) -> list[str]:
    """The top-level definitions and assignments of a module as stub items, in file order."""
    out: list[str] = []
    for node in tree.root_node.children:
        if _definition(node) is not None:
            out += _stub(node, source, "")
        elif _is_assignment(node):
            out.append(_assignment_line(node, source))
    return out


def outline_chunk(source: SourceFile, budget_tokens: int, count_tokens: CountTokens) -> Chunk | None:
    """`source` in at most `budget_tokens`: its outline (Python with a tree), else its first
    lines; cut between whole items. The same file gives the same chunk wherever the cursor is."""
    if source.tree is not None and source.language == "python":
        items = python_outline(source.tree, source.text.encode("utf-8", "surrogatepass"))
    else:
        items = source.text.splitlines()
    kept: list[str] = []
    used = 0
    for item in items:
        cost = count_tokens(item + "\n")
        if used + cost > budget_tokens:
            break
        kept.append(item)
        used += cost
    return Chunk(source.path, 0, "\n".join(kept) + "\n", "outline") if kept else None


# A file's outline in the package head gets at most this share of the budget, whatever the
# number of files: the share must not change when a file opens, or every outline would.
PACKAGE_SHARE = 4


def package_chunks(others: Sequence[SourceFile], budget_tokens: int,
                   count_tokens: CountTokens) -> list[Chunk]:
    """An outline of each file of `others` (in the order they were opened, oldest first),
    each within a fixed share of the budget, for the newest files that fit together; in
    that order. Nothing here depends on the cursor or on the current file, so one prefill
    serves every file the user opens next, and a file opened later appends its outline."""
    share = budget_tokens // PACKAGE_SHARE - 8  # 8: the file separator and path
    chosen: list[Chunk] = []
    used = 0
    for source in reversed(others):
        chunk = outline_chunk(source, share, count_tokens) if share > 16 else None
        if chunk is None:
            continue
        cost = count_tokens(chunk.text) + 8
        if used + cost > budget_tokens:
            break
        chosen.append(chunk)
        used += cost
    return chosen[::-1]


# --- filling the budget -------------------------------------------------------------------


def _overlaps(chunk: Chunk, chosen: Sequence[Chunk]) -> bool:
    """Whether `chunk` shares a line of its file with any of `chosen`."""
    end = chunk.start_line + chunk.text.count("\n")
    return any(c.path == chunk.path and c.start_line <= end
               and chunk.start_line <= c.start_line + c.text.count("\n") for c in chosen)


def pick_chunks(
    current: SourceFile, query: str, others: Sequence[SourceFile], budget_tokens: int,
    count_tokens: CountTokens, sources: Sequence[str] = ("definitions", "similar"),
) -> list[Chunk]:
    """Chunks within `budget_tokens` (as counted by `count_tokens`, plus a few for each
    file header), definitions first, then similar windows by score; ordered by (path, line)."""
    if budget_tokens <= 0 or not others:
        return []
    candidates: list[Chunk] = []
    if "definitions" in sources:
        candidates += imported_definitions(current, others)
    if "similar" in sources:
        q = identifiers(query)
        found = [best_window(q, o) for o in others]
        candidates += sorted((c for c in found if c is not None and c.score >= MIN_SIMILARITY),
                             key=lambda c: -c.score)
    return fill_budget(candidates, budget_tokens, count_tokens)


def fill_budget(ranked: Iterable[Chunk], budget_tokens: int, count_tokens: CountTokens) -> list[Chunk]:
    """The chunks of `ranked`, best first, that fit `budget_tokens` (each counted with a few
    tokens for its file header) without sharing a line with one taken before; ordered by
    (path, line), a stable order whatever the scores."""
    chosen: list[Chunk] = []
    used = 0
    for chunk in ranked:
        if _overlaps(chunk, chosen):
            continue
        cost = count_tokens(chunk.text) + 8  # the file separator and path
        if used + cost > budget_tokens:
            continue
        chosen.append(chunk)
        used += cost
    return sorted(chosen, key=lambda c: (c.path, c.start_line))
