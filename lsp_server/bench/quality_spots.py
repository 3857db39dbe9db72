"""Fill-in-the-middle spots cut from real code, their neighbour files, and their scores.

Pure (no torch, no server): `specfill bench quality` runs these through the server and the
anchor. Spots are cut by a seeded RNG from installed third-party packages (held out: the
standard library is kept for tuning):
- line spot: the cursor after a line's first token; the rest of that line is to predict.
- block spot: the cursor at the start of a statement inside a function body (after its
  indentation); that whole statement (up to `BLOCK_MAX_LINES` lines) is to predict.
Neighbours: the files the spot's module imports from its own package, then its siblings.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import random
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

PACKAGES = ("transformers", "torch", "networkx", "sympy", "hypothesis", "rich", "pygments")
MIN_FILE_BYTES, MAX_FILE_BYTES = 2_000, 80_000
MAX_NEIGHBOUR_BYTES = 60_000
BLOCK_MAX_LINES = 8
_FIRST_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\S)")

SpotKind = Literal["line", "block"]


@dataclass(frozen=True)
class QualitySpot:
    kind: SpotKind
    path: str  # the file the spot is cut from
    root: str  # the directory holding its top-level package (the "workspace")
    line: int  # cursor, 0-based
    column: int  # cursor, in str characters of that line
    prefix: str  # the document before the cursor
    suffix: str  # the document after the cursor (the expected text removed)
    expected: str
    neighbours: tuple[str, ...] = ()

    @property
    def document(self) -> str:
        return self.prefix + self.suffix


# --- finding files --------------------------------------------------------------------


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def candidate_files(packages: Sequence[str], rng: random.Random) -> list[tuple[Path, Path]]:
    """(file, root) for the mid-sized .py files of the installed packages, shuffled within
    each package and then interleaved, so that one big package does not fill the sample."""
    groups = []
    for name in packages:
        top = package_dir(name)
        if top is None:
            continue
        files = [(p, top.parent) for p in sorted(top.rglob("*.py"))
                 if not p.is_symlink() and MIN_FILE_BYTES <= p.stat().st_size <= MAX_FILE_BYTES]
        rng.shuffle(files)
        groups.append(files)
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def string_lines(text: str) -> set[int]:
    """0-based lines inside multi-line strings (docstrings): prose, not code."""
    out: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                out.update(range(tok.start[0] - 1, tok.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return out


# --- cutting spots --------------------------------------------------------------------


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def line_spot(path: Path, root: Path, text: str, rng: random.Random) -> QualitySpot | None:
    lines = text.split("\n")
    starts = _line_starts(text)
    choices = []
    prose = string_lines(text)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i in prose or len(stripped) < 8 or stripped.startswith(("#", '"', "'", "@")):
            continue
        m = _FIRST_TOKEN.match(line)
        rest = line[m.end():] if m else ""
        if len(rest.strip()) >= 3:
            choices.append((i, m.end()))
    if not choices:
        return None
    i, col = rng.choice(choices)
    cut = starts[i] + col
    end = starts[i] + len(lines[i])
    return QualitySpot("line", str(path), str(root), i, col, text[:cut], text[end:],
                       text[cut:end].rstrip())


def block_spot(path: Path, root: Path, text: str, rng: random.Random) -> QualitySpot | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.split("\n")
    starts = _line_starts(text)
    choices = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in node.body[1:]:  # never the first statement (often a docstring)
            first, last = stmt.lineno - 1, (stmt.end_lineno or stmt.lineno) - 1
            if last - first + 1 <= BLOCK_MAX_LINES and lines[first][:stmt.col_offset].strip() == "":
                choices.append((first, last, stmt.col_offset))
    if not choices:
        return None
    first, last, col = rng.choice(choices)
    cut = starts[first] + col
    end = starts[last] + len(lines[last])
    expected = text[cut:end]
    if len(expected.strip()) < 3:
        return None
    return QualitySpot("block", str(path), str(root), first, col, text[:cut], text[end:], expected)


def cut_spots(count: int, seed: int, kinds: Sequence[SpotKind] = ("line", "block"),
              packages: Sequence[str] = PACKAGES, neighbours: int = 4) -> list[QualitySpot]:
    """`count` spots, alternating kinds, each from a different file drawn by `seed`."""
    rng = random.Random(seed)
    files = candidate_files(packages, rng)
    spots: list[QualitySpot] = []
    for path, root in files:
        if len(spots) >= count:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        kind = kinds[len(spots) % len(kinds)]
        cut = line_spot if kind == "line" else block_spot
        spot = cut(path, root, text, rng)
        if spot is not None:
            found = neighbour_files(path, root, text, neighbours)
            spots.append(QualitySpot(**{**spot.__dict__, "neighbours": tuple(map(str, found))}))
    return spots


# --- neighbours -----------------------------------------------------------------------


def _module_file(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_package_files(path: Path, root: Path, text: str) -> list[Path]:
    """Files of the spot's own top-level package that it imports, in import order."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    package = path.relative_to(root).parts[0]
    here = ".".join(path.relative_to(root).with_suffix("").parts)
    if path.name == "__init__.py":
        here = here.rsplit(".", 1)[0] + ".__init__"
    out: list[Path] = []
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = here.split(".")[: -node.level]
            dotted = ".".join(base + ([node.module] if node.module else []))
        else:
            dotted = node.module or ""
        if dotted.split(".")[0] != package:
            continue
        found = None
        if node.module is None:  # `from . import sibling`: the names are modules
            found = next((f for a in node.names if (f := _module_file(root, f"{dotted}.{a.name}"))), None)
        found = found or _module_file(root, dotted)
        if found is not None and found != path and found not in out:
            out.append(found)
    return out


def neighbour_files(path: Path, root: Path, text: str, limit: int = 4) -> list[Path]:
    siblings = sorted(p for p in path.parent.glob("*.py") if p != path)
    out = []
    for candidate in imported_package_files(path, root, text) + siblings:
        if len(out) >= limit:
            break
        if candidate not in out and not candidate.is_symlink() \
                and candidate.stat().st_size <= MAX_NEIGHBOUR_BYTES:
            out.append(candidate)
    return out


# --- scoring --------------------------------------------------------------------------


def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def edit_similarity(a: str, b: str) -> float:
    longest = max(len(a), len(b))
    return 1.0 - levenshtein(a, b) / longest if longest else 1.0


def judged_text(spot: QualitySpot, completion: str) -> str:
    """What is compared with the expected text: the first line for a line spot, as many
    lines as expected for a block spot (a longer completion is not penalised twice)."""
    lines = completion.split("\n")
    want = 1 if spot.kind == "line" else spot.expected.count("\n") + 1
    return "\n".join(line.rstrip() for line in lines[:want]).rstrip()


def score(spot: QualitySpot, completion: str) -> tuple[bool, float]:
    """(exact match, edit similarity) of a completion against the removed text."""
    got = judged_text(spot, completion)
    want = "\n".join(line.rstrip() for line in spot.expected.split("\n")).rstrip()
    return got.strip() == want.strip(), edit_similarity(got.strip(), want.strip())
