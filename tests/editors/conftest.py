"""Shared checks for the real-editor tests.

A missing dependency skips the test with the command that installs it, unless
SPECFILL_REQUIRE_EDITORS=1 (CI), where it fails instead: there, a skipped editor test would
hide a broken setup. Missing models always fail: every other part of the test suite needs
them too, and `make models` fixes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .support import ARTIFACTS, missing


@pytest.fixture(scope="session")
def specfill_exe() -> Path:
    """The server of the venv running the tests, so the editors test this checkout."""
    exe = Path(sys.prefix) / "bin" / "specfill"
    if not exe.is_file():
        missing(f"{exe} not found: run make setup")
    return exe


@pytest.fixture(scope="session")
def default_models() -> Path:
    """The default model pair must be fetched; the editors talk to the real server."""
    from tests.model_cache import default_models_or_fail

    return default_models_or_fail()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """tests/editors/artifacts: screenshots and logs of the last run, ignored by git."""
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    return ARTIFACTS
