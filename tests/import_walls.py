"""The walls between rooms (DESIGN.md), checked two ways: in a fresh interpreter, which heavy
packages importing some of specfill's modules pulls in (`heavy_imports`); and in the source,
every import a module could run, inside functions too, followed through specfill's own
modules (`reachable`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "pygls")


def heavy_imports(*modules: str) -> list[str]:
    """The packages of HEAVY that are loaded after importing `modules` alone."""
    code = (f"import sys\nimport {', '.join(modules)}\n"
            f"print(' '.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# --- the same walls read from the source: every import, those inside functions included ---

PACKAGE = "lsp_server"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def modules_in(room: str = "") -> list[str]:
    """Dotted names of the modules under lsp_server/<room> (the whole package for "")."""
    base = ROOT / room if room else ROOT
    names = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _path_of(module: str) -> Path | None:
    base = ROOT.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, (ast.Name, ast.Attribute)) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def direct_imports(module: str) -> set[str]:
    """Absolute dotted names `module` imports anywhere in its file, at run time (imports under
    `if TYPE_CHECKING:` never run). `from pkg import name` yields pkg.name when that is a module."""
    path = _path_of(module)
    assert path is not None, module
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
               for stmt in node.body for n in ast.walk(stmt)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if _path_of(f"{base}.{alias.name}") is not None)
    return found


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def reachable(*modules: str) -> tuple[set[str], set[str]]:
    """(specfill modules, outside top-level packages) that importing `modules` can load, through
    any chain of imports: module level or inside a function. An upper bound of heavy_imports."""
    ours: set[str] = set()
    outside: set[str] = set()
    todo = [m for name in modules for m in _with_parents(name)]
    while todo:
        name = todo.pop()
        if name in ours:
            continue
        if name.split(".")[0] != PACKAGE or _path_of(name) is None:
            if name.split(".")[0] != PACKAGE:
                outside.add(name.split(".")[0])
            continue
        ours.add(name)
        for imported in direct_imports(name):
            todo.extend(_with_parents(imported))
    return ours, outside
