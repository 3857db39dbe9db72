"""Files of the workspace that are not open, as more sources for cross-file context
(opt-in: `contextWindow.workspaceFiles`).

Which files, for the document being completed:
1. the modules a Python file imports (`from M import a`): relative imports against its
   directory, absolute ones against each workspace folder, its `src/`, and the folder above
   the file's top package (the directory chain that holds `__init__.py` files);
2. then the file's siblings: same directory, same extension, most recently modified first.
At most `MAX_FILES` files.

Safety, since these are files the user never showed us: a path is used only when its real
path (every link resolved) lies inside the real path of a workspace folder, it is a non-empty
regular file of at most `MAX_BYTES`, and it decodes as UTF-8. Nothing is read outside the folders,
whatever links point where. Reads are cached by (mtime, size), so a re-plan costs a stat each.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tree_sitter import Tree

from lsp_server.context.snippets import SourceFile, module_paths, python_imports

MAX_FILES = 8
MAX_BYTES = 256 * 1024  # larger files are generated or data, rarely what the cursor needs
MAX_SIBLINGS_SCANNED = 200  # a directory with thousands of files is not a package
MAX_CACHED = 256

Parse = Callable[[bytes], "Tree | None"]


@dataclass(frozen=True)
class _Cached:
    mtime_ns: int
    size: int
    file: SourceFile | None  # None: unreadable or not UTF-8


def inside(path: str, roots: Sequence[str]) -> bool:
    """Whether `path` (already real) lies inside one of `roots` (already real)."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def import_bases(current: str, roots: Sequence[str]) -> list[str]:
    """Directories an absolute import may start from, nearest first."""
    bases = []
    top = posixpath.dirname(current)
    while os.path.isfile(posixpath.join(top, "__init__.py")) and posixpath.dirname(top) != top:
        top = posixpath.dirname(top)
    bases.append(top)
    for root in roots:
        bases += [root, posixpath.join(root, "src")]
    return list(dict.fromkeys(bases))


def imported_paths(current: SourceFile, roots: Sequence[str], real_roots: Sequence[str]) -> list[str]:
    """Files on disk, inside `real_roots`, that `current` (Python) imports from, in import
    order; nothing outside them is even looked at."""
    if current.tree is None or current.language != "python":
        return []
    source = current.text.encode("utf-8", "surrogatepass")
    out = []
    bases = None
    for imp in python_imports(current.tree, source):
        if imp.level:
            candidates = module_paths(current.path, imp)
        else:
            bases = bases if bases is not None else import_bases(current.path, roots)
            tails = module_paths(current.path, imp)  # "/pkg/mod.py", "/pkg/mod/__init__.py"
            candidates = [base.rstrip("/") + tail for base in bases for tail in tails]
        out += [c for c in candidates
                if inside(os.path.realpath(c), real_roots) and os.path.isfile(c)][:1]
    return out


def sibling_paths(current: str) -> list[str]:
    """Same directory, same extension, most recently modified first."""
    directory, ext = posixpath.dirname(current), posixpath.splitext(current)[1]
    if not ext:
        return []
    found = []
    try:
        with os.scandir(directory) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_SIBLINGS_SCANNED:
                    break
                if entry.name.endswith(ext) and entry.path != current and entry.is_file():
                    found.append((entry.stat().st_mtime_ns, entry.path))
    except OSError:
        return []
    return [path for _, path in sorted(found, reverse=True)]


class WorkspaceFiles:
    """The not-open files worth reading for a document, read safely and cached."""

    def __init__(self, parse: Callable[[str], Parse | None]):
        self._parse_for = parse  # language id -> parser function (None: no grammar)
        self._cache: dict[str, _Cached] = {}

    def for_document(self, current: SourceFile, roots: Sequence[str],
                     open_paths: Iterable[str]) -> list[SourceFile]:
        real_roots = [os.path.realpath(r) for r in roots if r]
        if not real_roots or not inside(os.path.realpath(current.path), real_roots):
            return []  # a file outside every folder gets no workspace context
        skip = {*open_paths, current.path}
        out: list[SourceFile] = []
        for path in imported_paths(current, roots, real_roots) + sibling_paths(current.path):
            if len(out) >= MAX_FILES:
                break
            if path in skip:
                continue
            skip.add(path)
            file = self._read(path, real_roots, current.language)
            if file is not None:
                out.append(file)
        return out

    def _read(self, path: str, real_roots: Sequence[str], language: str) -> SourceFile | None:
        real = os.path.realpath(path)
        if not inside(real, real_roots):
            return None  # a link out of the workspace
        try:
            st = os.stat(real)
        except OSError:
            return None
        if not os.path.isfile(real) or not 0 < st.st_size <= MAX_BYTES:
            return None
        cached = self._cache.get(path)
        if cached is not None and (cached.mtime_ns, cached.size) == (st.st_mtime_ns, st.st_size):
            return cached.file
        file = None
        try:
            with open(real, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            if len(data) <= MAX_BYTES:
                parse = self._parse_for(language)
                file = SourceFile(path, data.decode("utf-8"), parse(data) if parse else None, language)
        except (OSError, UnicodeDecodeError):
            file = None
        self._cache.pop(path, None)
        self._cache[path] = _Cached(st.st_mtime_ns, st.st_size, file)
        while len(self._cache) > MAX_CACHED:  # the oldest read goes first
            del self._cache[next(iter(self._cache))]
        return file
