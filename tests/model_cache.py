"""The real default pair must be on disk for slow and editor tests; say how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.commands.models import default_pair_status
from lsp_server.models.registry import resolve_cache_dir


def default_models_or_fail() -> Path:
    cache = resolve_cache_dir()
    missing = [s.spec.name for s in default_pair_status(cache) if not s.ready]
    if missing:
        pytest.fail(f"default models missing in {cache} ({', '.join(missing)}): run `make models`")
    return cache
