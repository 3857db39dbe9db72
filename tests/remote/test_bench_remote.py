"""`specfill bench remote`'s measuring pieces against a real llama-server: the raw client it
compares specfill with leaves the server idle (it once stopped reading at the first text, so
the next request queued behind the server's leftover generation), and the routers it
measures open their HTTP client before the first completion."""

from __future__ import annotations

import asyncio
import sysconfig
from pathlib import Path

import httpx
import pytest

from lsp_server.backends.remote import RemoteBackend, RemoteSettings
from lsp_server.backends.routing import Router
from lsp_server.bench.remote_bench import body_for, busy, half_typed, options, raw_first_text, spots, wait_idle
from tests.remote.conftest import server

pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def plain(gguf_pair, log_dir):
    with server(gguf_pair, log_dir, "bench", draft=False, threads=2, ctx=2048) as proc:
        yield proc


async def test_the_raw_client_reads_to_the_end_and_leaves_the_server_idle(plain):
    source = (Path(sysconfig.get_paths()["stdlib"]) / "glob.py").read_text(encoding="utf-8")
    text, spot = half_typed(source, spots(source, 1)[0])
    body = {**body_for(text, "file:///bench/glob.py", spot, options([plain.url], 8)),
            "stop": [], "n_predict": 6}  # no early stop: text first, more tokens after it
    async with httpx.AsyncClient(timeout=120) as client:
        first = await raw_first_text(client, plain.url, body)
        assert first is not None and first > 0
        assert not await busy(client, plain.url)  # nothing left running into the next request
        assert await wait_idle(client, plain.url) < 0.05


async def test_a_router_opens_its_client_before_the_first_completion(plain):
    backend = RemoteBackend(RemoteSettings(plain.url, "llama-server"))
    router = Router([backend], lambda message: None)
    await asyncio.gather(*router._primes)
    client = backend._client
    assert client is not None and backend.healthy
    assert backend.client() is client  # the first completion reuses it
    router.stop()
    await backend.aclose()
