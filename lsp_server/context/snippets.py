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
    kind: str  # "definition" | "similar"
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


# --- filling the budget -------------------------------------------------------------------


def _overlaps(chunk: Chunk, chosen: Sequence[Chunk]) -> bool:
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
    chosen: list[Chunk] = []
    used = 0
    for chunk in candidates:
        if _overlaps(chunk, chosen):
            continue
        cost = count_tokens(chunk.text) + 8  # the file separator and path
        if used + cost > budget_tokens:
            continue
        chosen.append(chunk)
        used += cost
    return sorted(chosen, key=lambda c: (c.path, c.start_line))
