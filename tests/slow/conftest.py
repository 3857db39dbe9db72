"""Slow tests run the real default pair; `make test` fetches it first (`make models`)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.model_cache import default_models_or_fail


@pytest.fixture(scope="session", autouse=True)
def real_model_threads():
    # tests/conftest.py pins one thread for tiny models; real models want every core.
    torch.set_num_threads(int(os.environ.get("SPECFILL_TEST_THREADS", os.cpu_count() or 2)))


@pytest.fixture(scope="session")
def real_cache():
    return default_models_or_fail()
