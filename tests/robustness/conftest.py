"""The robustness suite (`make test-robustness`): a hostile client against the real server
over stdio, on tiny models, bounded in time. Each test records its figures in `figures`;
they are printed at the end of the run and written to bench-results/robustness.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import tiny_pair_dirs  # noqa: F401  (the session's tiny models)

FIGURES: dict[str, object] = {}


@pytest.fixture(scope="session")
def figures() -> dict[str, object]:
    return FIGURES


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("robustness figures")
    for name, value in FIGURES.items():
        terminalreporter.write_line(f"{name}: {value}")
    out = Path(os.environ.get("OUT", "bench-results")) / "robustness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(FIGURES, indent=2) + "\n")
    terminalreporter.write_line(f"written to {out}")
