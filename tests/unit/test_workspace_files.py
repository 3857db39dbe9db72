"""Files that are not open, read for cross-file context: which ones, and never one outside
the workspace folders (links included), too large, or not text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lsp_server.completion.prompts import parse_function
from lsp_server.context.snippets import SourceFile, pick_chunks
from lsp_server.context.workspace_files import MAX_BYTES, MAX_FILES, WorkspaceFiles, import_bases

SHAPES = "def area(radius):\n    return 3.14 * radius ** 2\n\n\nclass Circle:\n    pass\n"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def current(path: Path, text: str) -> SourceFile:
    write(path, text)
    return SourceFile(str(path), text, parse_function("python")(text.encode()), "python")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(root / "pkg" / "__init__.py", "")
    write(root / "pkg" / "geometry" / "__init__.py", "")
    write(root / "pkg" / "geometry" / "shapes.py", SHAPES)
    write(root / "pkg" / "units.py", "METRE = 1.0\n")
    return root


def paths(files) -> list[str]:
    return [f.path for f in files]


def test_relative_and_absolute_imports_resolve_to_files_on_disk(workspace: Path):
    main = current(workspace / "pkg" / "geometry" / "main.py",
                   "from .shapes import area\nfrom pkg.units import METRE\n\nx = area(METRE)\n")
    files = WorkspaceFiles(parse_function).for_document(main, [str(workspace)], [])
    assert paths(files)[:2] == [str(workspace / "pkg/geometry/shapes.py"), str(workspace / "pkg/units.py")]
    shapes = files[0]
    assert shapes.text == SHAPES and shapes.tree is not None and shapes.language == "python"
    # the imported definitions are what pick_chunks takes
    chunks = pick_chunks(main, "x = area(", files, 512, lambda t: len(t) // 4, ("definitions",))
    assert [c.text.splitlines()[0] for c in chunks] == ["def area(radius):", "METRE = 1.0"]


def test_absolute_imports_start_above_the_top_package_and_at_src(tmp_path: Path, workspace: Path):
    inner = str(workspace / "pkg" / "geometry" / "main.py")
    assert import_bases(inner, [str(workspace)]) == [str(workspace), str(workspace / "src")]
    # a src layout: a test outside the package imports it by its absolute name
    root = tmp_path / "srcproj"
    util = write(root / "src" / "lib" / "util.py", "def helper():\n    return 1\n")
    write(root / "src" / "lib" / "__init__.py", "")
    test = current(root / "tests" / "test_util.py", "from lib.util import helper\n")
    files = WorkspaceFiles(parse_function).for_document(test, [str(root)], [])
    assert paths(files)[0] == str(util)


def test_siblings_follow_imports_newest_first_and_open_files_are_skipped(workspace: Path):
    geo = workspace / "pkg" / "geometry"
    old, new = write(geo / "old.py", "A = 1\n"), write(geo / "new.py", "B = 2\n")
    os.utime(old, (1_000_000, 1_000_000))
    write(geo / "notes.txt", "not python")
    main = current(geo / "main.py", "from .shapes import area\n")
    files = WorkspaceFiles(parse_function).for_document(main, [str(workspace)], [str(new)])
    assert paths(files) == [str(geo / "shapes.py"), str(old)]  # the empty __init__.py neither


def test_at_most_max_files(workspace: Path):
    for i in range(MAX_FILES + 5):
        write(workspace / "flat" / f"m{i}.py", f"V{i} = {i}\n")
    main = current(workspace / "flat" / "main.py", "x = 1\n")
    assert len(WorkspaceFiles(parse_function).for_document(main, [str(workspace)], [])) == MAX_FILES


def test_nothing_is_read_outside_the_workspace_folders(tmp_path: Path, workspace: Path):
    outside = write(tmp_path / "secret" / "keys.py", "TOKEN = 'do not read'\n")
    geo = workspace / "pkg" / "geometry"
    (geo / "leak.py").symlink_to(outside)  # a link out of the workspace
    (geo / "alias.py").symlink_to(geo / "shapes.py")  # a link that stays inside is fine
    main = current(geo / "main.py", "x = 1\n")
    files = WorkspaceFiles(parse_function).for_document(main, [str(workspace)], [])
    assert all("do not read" not in f.text for f in files)
    assert str(geo / "leak.py") not in paths(files) and str(geo / "alias.py") in paths(files)
    # a file outside every folder gets no workspace files at all
    stray = current(tmp_path / "secret" / "main.py", "from .keys import TOKEN\n")
    assert WorkspaceFiles(parse_function).for_document(stray, [str(workspace)], []) == []
    assert WorkspaceFiles(parse_function).for_document(main, [], []) == []


def test_a_linked_folder_whose_target_is_outside_is_refused(tmp_path: Path, workspace: Path):
    write(tmp_path / "elsewhere" / "units.py", "SECRET = 1\n")
    (workspace / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    main = current(workspace / "app.py", "from linked.units import SECRET\n")
    files = WorkspaceFiles(parse_function).for_document(main, [str(workspace)], [])
    assert all("SECRET" not in f.text for f in files)


def test_large_binary_and_undecodable_files_are_skipped(workspace: Path):
    geo = workspace / "pkg" / "geometry"
    write(geo / "big.py", "x = 1\n" * (MAX_BYTES // 6 + 10))
    write(geo / "latin.py", b"name = '\xe9t\xe9'\n")
    main = current(geo / "main.py", "x = 1\n")
    got = paths(WorkspaceFiles(parse_function).for_document(main, [str(workspace)], []))
    assert str(geo / "big.py") not in got and str(geo / "latin.py") not in got
    assert str(geo / "shapes.py") in got


def test_a_changed_file_is_read_again(workspace: Path):
    shapes = workspace / "pkg" / "geometry" / "shapes.py"
    main = current(workspace / "pkg" / "geometry" / "main.py", "from .shapes import area\n")
    reader = WorkspaceFiles(parse_function)
    assert reader.for_document(main, [str(workspace)], [])[0].text == SHAPES
    write(shapes, SHAPES + "\nPI = 3.14159\n")
    os.utime(shapes, ns=(os.stat(shapes).st_mtime_ns + 10**9,) * 2)
    assert reader.for_document(main, [str(workspace)], [])[0].text.endswith("PI = 3.14159\n")
