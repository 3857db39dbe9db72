"""Quality-benchmark spots: seeded, the expected text removed, neighbours from the
spot's own package, and the scores."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from lsp_server.bench.quality_spots import (cut_spots, edit_similarity, judged_text,
                                            neighbour_files, score)

MODULE = '''"""A module."""
from .helpers import combine
from . import siblingmod
import os


def total(values, factor):
    """Sum them."""
    result = 0
    for value in values:
        result = combine(result, value * factor)
    return result


def other(a, b):
    """Two."""
    first = a + b
    second = first * 2
    return second
''' * 8


@pytest.fixture()
def package(tmp_path: Path, monkeypatch) -> Path:
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def combine(a, b):\n    return a + b\n")
    (pkg / "siblingmod.py").write_text("X = 1\n")
    (pkg / "zz_unrelated.py").write_text("Y = 2\n")
    for i in range(4):
        (pkg / f"mod{i}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield pkg
    sys.modules.pop("fakepkg", None)


def test_spots_are_seeded_and_remove_exactly_the_expected_text(package: Path):
    spots = cut_spots(4, seed=1, packages=("fakepkg",))
    assert [s.kind for s in spots] == ["line", "block", "line", "block"]
    assert cut_spots(4, seed=1, packages=("fakepkg",)) == spots
    for spot in spots:
        original = Path(spot.path).read_text()
        assert original.startswith(spot.prefix) and original.endswith(spot.suffix)
        assert spot.prefix + spot.expected + spot.suffix == original
        assert '"""' not in spot.expected  # never prose


def test_neighbours_are_imported_package_files_then_siblings(package: Path):
    path = package / "mod0.py"
    found = neighbour_files(path, package.parent, path.read_text(), limit=3)
    assert found[:2] == [package / "helpers.py", package / "siblingmod.py"]
    assert path not in found and len(found) == 3


def test_scores_compare_the_first_line_or_as_many_lines_as_expected(package: Path):
    line, block = cut_spots(2, seed=3, packages=("fakepkg",))
    assert score(line, line.expected + "\nmore lines") == (True, 1.0)
    assert judged_text(block, block.expected + "\nextra") == block.expected.rstrip()
    assert score(block, "")[0] is False
    assert edit_similarity("abcd", "abce") == 0.75 and edit_similarity("", "") == 1.0


def test_the_conditions_ask_the_server_for_the_context_they_name():
    import argparse

    from lsp_server.bench.quality import CONDITIONS, add_arguments, server_options

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args([])
    assert "specfill+workspace" in CONDITIONS and args.conditions.split(",") == list(CONDITIONS)
    assert server_options(args, workspace_files=True)["contextWindow"]["workspaceFiles"] is True
    window = server_options(args)["contextWindow"]
    assert window["workspaceFiles"] is False and window["extraTokens"] == args.extra_tokens > 0
    # the file alone reads no other file: not even ones earlier spots edited
    assert server_options(args, cross_file=False)["contextWindow"]["extraTokens"] == 0
