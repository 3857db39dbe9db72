"""The walls between rooms (DESIGN.md), checked in a fresh interpreter: which heavy
packages importing some of specfill's modules pulls in."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "pygls")


def heavy_imports(*modules: str) -> list[str]:
    """The packages of HEAVY that are loaded after importing `modules` alone."""
    code = (f"import sys\nimport {', '.join(modules)}\n"
            f"print(' '.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()
