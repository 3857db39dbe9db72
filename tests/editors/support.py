"""Helpers shared by the real-editor tests (paths, skip-or-fail, screenshots)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
DOCS_IMG = ROOT / "docs" / "img"
INSTALL_HINT = "run scripts/install-editor-deps.sh"

# The file both editor tests complete in. It ends in the body of `is_prime`, one space short
# of the indentation: typing that space (BLOCK_TYPED) leaves the cursor at the start of a
# blank body line, where the server completes a whole block; typing " if n" asks for the
# rest of one statement.
SOURCE = '''"""Small helpers for number theory."""


def is_prime(n: int) -> bool:
    """Return True when n is a prime number."""
   '''
BLOCK_TYPED = " "
STATEMENT_TYPED = " if n"
# The start of a statement no block suggestion begins with (they begin with "if n" or "for").
UNPREDICTED_TYPED = " total = n"


def editors_required() -> bool:
    return os.environ.get("SPECFILL_REQUIRE_EDITORS") == "1"


def missing(reason: str) -> None:
    """Skip (or fail, when editors are required) because a dependency is missing."""
    if editors_required():
        pytest.fail(f"{reason} (SPECFILL_REQUIRE_EDITORS=1, so this fails instead of skipping)")
    pytest.skip(reason)


def require_executable(path: Path | str, hint: str) -> Path:
    found = shutil.which(str(path))
    if found is None:
        missing(f"{path} not found: {hint}")
    return Path(found)


def publish_screenshot(source: Path, name: str) -> Path:
    """The README's pictures are updated deliberately: with SPECFILL_UPDATE_SCREENSHOTS=1 the
    screenshot is copied into docs/img; otherwise it stays in tests/editors/artifacts
    (ignored by git), so `make test` never rewrites tracked files."""
    if os.environ.get("SPECFILL_UPDATE_SCREENSHOTS") != "1":
        return source
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    target = DOCS_IMG / name
    shutil.copyfile(source, target)
    return target
