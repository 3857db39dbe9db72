"""The backend the configuration asks for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from lsp_server.backends.base import Backend
from lsp_server.config import BackendConfig, backend_problem


def read_api_key(backend: BackendConfig) -> tuple[str | None, str | None]:
    """(key, problem). The key itself never goes into a message."""
    if backend.apiKeyEnv:
        key = os.environ.get(backend.apiKeyEnv, "").strip()
        if not key:
            return None, f"backend.apiKeyEnv names {backend.apiKeyEnv}, which is not set"
        return key, None
    if backend.apiKeyFile:
        path = Path(backend.apiKeyFile).expanduser()
        try:
            key = path.read_text(encoding="utf-8").strip().splitlines()[0].strip()
        except (OSError, IndexError, UnicodeDecodeError) as exc:
            return None, f"cannot read backend.apiKeyFile {path}: {type(exc).__name__}"
        return key, None
    return None, None


def build_backend(backend: BackendConfig, local: Callable[[], Backend],
                  tell_user: Callable[[str], None]) -> Backend:
    """`local()` starts the local engine (the default backend, or the fallback)."""
    if backend.kind == "local":
        return local()
    from lsp_server.backends.remote import RemoteBackend, RemoteSettings
    from lsp_server.backends.routing import Router

    key, problem = read_api_key(backend)
    problem = backend_problem(backend) or problem
    if backend.caFile and not Path(backend.caFile).expanduser().is_file():
        problem = problem or f"backend.caFile {backend.caFile} is not a file"
    remotes = [] if problem else [
        RemoteBackend(RemoteSettings(url, backend.kind, backend.model, key,
                                     str(Path(backend.caFile).expanduser()) if backend.caFile else "",
                                     backend.timeoutS))
        for url in backend.urls]
    fallback = local() if backend.fallback == "local" else None
    return Router(remotes, tell_user, fallback,
                  problem=f"{problem}; fix the backend settings" if problem else None)
