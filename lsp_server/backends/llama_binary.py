"""Where `scripts/build-llama-server.sh` puts llama.cpp's binaries (outside git, per user)."""

from __future__ import annotations

import os
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp is built


def llama_bin_dir(cache_dir: str | None = None) -> Path:
    root = Path(cache_dir or os.environ.get("SPECFILL_CACHE") or Path.home() / ".cache" / "specfill")
    return root / "llama-server" / LLAMA_CPP_VERSION / "bin"


def _binary(name: str, cache_dir: str | None) -> Path | None:
    path = llama_bin_dir(cache_dir) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def llama_server_path(cache_dir: str | None = None) -> Path | None:
    """The built `llama-server`, or None (run `make llama-server`)."""
    return _binary("llama-server", cache_dir)


def llama_bench_path(cache_dir: str | None = None) -> Path | None:
    return _binary("llama-bench", cache_dir)


def llama_env(cache_dir: str | None = None) -> dict[str, str]:
    """Environment to run the binaries with (their shared libraries, if any, sit beside them)."""
    env = dict(os.environ)
    lib = str(llama_bin_dir(cache_dir))
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env
