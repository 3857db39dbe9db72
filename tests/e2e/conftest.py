"""End-to-end: the real server as a subprocess over stdio, driven by pytest-lsp, on a tiny
model pair built on disk (the real pair is exercised in tests/slow/)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.tiny_hf import make_tiny_pair

SERVER = [sys.executable, "-m", "lsp_server", "serve", "--stdio"]

PY_SOURCE = '''import os


def greet(name):
    message = "hello " + name
    return message


class Point:
    def __init__(self, x, y):
        self.x = x
        
'''


@pytest.fixture(scope="session")
def tiny_pair_dirs() -> tuple[str, str]:
    root = Path(tempfile.mkdtemp(prefix="specfill-tiny-"))
    target, draft = make_tiny_pair(root)
    return str(target), str(draft)


def tiny_options(target: str, draft: str, **extra) -> dict:
    options = {"model": {"target": target, "draft": draft, "dtype": "fp32", "threads": 1},
               "maxNewTokens": 48}
    options.update(extra)
    return options


def init_params(options: dict) -> lsp.InitializeParams:
    return lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(
            window=lsp.WindowClientCapabilities(work_done_progress=True),
            general=lsp.GeneralClientCapabilities(position_encodings=[lsp.PositionEncodingKind.Utf16]),
        ),
        initialization_options=options,
    )
