"""Real llama-server processes on 127.0.0.1, built by `make llama-server`, on the default GGUF
pair from the model cache. Missing pieces skip these tests on a developer's machine and fail
them in CI (SPECFILL_REQUIRE_EDITORS=1 or CI set), where `make test` builds them first."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from lsp_server.backends.llama_binary import LlamaServerProcess, llama_server_path
from lsp_server.models.registry import resolve_cache_dir

TARGET_DIR, DRAFT_DIR = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"

SOURCE = '''import math


def area(radius):
    return math.pi * radius ** 2


def perimeter(radius):
    result = 
    return result


def main():
    
'''
LINE_SPOT = (4, 11)  # after "return ": a single-line context (the server applies the "\n" stop)
BLOCK_SPOT = (13, 4)  # an empty function body: a block


def must_run() -> bool:
    return os.environ.get("SPECFILL_REQUIRE_EDITORS") == "1" or bool(os.environ.get("CI"))


def missing(reason: str) -> None:
    if must_run():
        pytest.fail(f"{reason} (CI / SPECFILL_REQUIRE_EDITORS=1: `make test` builds and fetches it)")
    pytest.skip(reason)


def gguf(name: str) -> Path:
    found = sorted((resolve_cache_dir() / name).glob("*.gguf"))
    if not found:
        missing(f"no GGUF in {resolve_cache_dir() / name}: run `make models`")
    return found[0]


@pytest.fixture(scope="session")
def gguf_pair() -> tuple[Path, Path]:
    if llama_server_path() is None:
        missing("llama-server is not built: run `make llama-server`")
    return gguf(TARGET_DIR), gguf(DRAFT_DIR)


@pytest.fixture(scope="session")
def log_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="specfill-remote-"))


def server(gguf_pair, log_dir: Path, name: str, draft: bool = True, **kw) -> LlamaServerProcess:
    target, draft_file = gguf_pair
    return LlamaServerProcess(target, draft_file if draft else None,
                              log_path=log_dir / f"{name}.log", **kw)
