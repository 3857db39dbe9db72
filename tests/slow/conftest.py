"""Slow tests run the real default pair; `make test` fetches it first (`make models`)."""

from __future__ import annotations

import os

import pytest
import torch

from lsp_server.models.cli_models import default_pair_status
from lsp_server.models.registry import resolve_cache_dir


@pytest.fixture(scope="session", autouse=True)
def real_model_threads():
    # tests/conftest.py pins one thread for tiny models; real models want every core.
    torch.set_num_threads(int(os.environ.get("SPECFILL_TEST_THREADS", os.cpu_count() or 2)))


@pytest.fixture(scope="session")
def real_cache():
    root = resolve_cache_dir()
    missing = [s.spec.name for s in default_pair_status(root) if not s.ready]
    if missing:
        pytest.fail(f"default models missing in {root} ({', '.join(missing)}): run `make models`")
    return root
