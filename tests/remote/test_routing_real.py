"""Two real llama-servers behind specfill: a document's requests stay on one (its cache
grows), killing it fails over to the other, both down -> the local engine (tiny models here)
with one message, and a server that comes back gets its documents back."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest

from lsp_server.backends.llama_binary import LlamaServerProcess
from lsp_server.client import SpecfillClient
from tests.remote.conftest import BLOCK_SPOT, SOURCE, server
from tests.tiny_hf import make_tiny_pair

pytestmark = pytest.mark.remote
URI = "file:///work/ring.py"


@pytest.fixture(scope="module")
def tiny_dirs():
    root = Path(tempfile.mkdtemp(prefix="specfill-tiny-remote-"))
    return [str(p) for p in make_tiny_pair(root)]


def lines_by_url(stats: dict) -> dict:
    return {b["url"]: b for b in stats["backends"] if b["kind"] != "local"}


def local_line(stats: dict) -> dict:
    (line,) = [b for b in stats["backends"] if b["kind"] == "local"]
    return line


async def wait_healthy(client: SpecfillClient, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not lines_by_url(await client.stats())[url]["healthy"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} not healthy again after {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


async def test_affinity_failover_local_fallback_and_failback(gguf_pair, log_dir, tiny_dirs):
    a = server(gguf_pair, log_dir, "ring-a", draft=False, threads=1, ctx=2048).start()
    b = server(gguf_pair, log_dir, "ring-b", draft=False, threads=1, ctx=2048).start()
    back = None
    target, draft = tiny_dirs
    options = {"backend": {"kind": "llama-server", "urls": [a.url, b.url], "fallback": "local",
                           "timeoutS": 120.0},
               "model": {"target": target, "draft": draft, "dtype": "fp32", "threads": 1},
               "maxNewTokens": 4}
    try:
        async with SpecfillClient(options) as client:
            await client.wait_ready(60)
            client.open(URI, "python", SOURCE)
            for _ in range(3):
                text, _ = await client.complete(URI, *BLOCK_SPOT)
                assert text.strip()
            lines = lines_by_url(await client.stats())
            owner_url = next(u for u, line in lines.items() if line["requests"] == 3)
            other_url = next(u for u in lines if u != owner_url)
            assert lines[other_url]["requests"] == 0  # every request stayed on one server
            assert lines[owner_url]["cached_prompt_tokens"] > 0  # ... and reused its cache
            owner, other = (a, b) if owner_url == a.url else (b, a)

            owner.kill()
            text, _ = await client.complete(URI, *BLOCK_SPOT)
            assert text.strip()
            lines = lines_by_url(await client.stats())
            assert lines[other_url]["completed"] == 1 and lines[owner_url]["errors"]
            assert not [m for m in client.messages if m.kind == "show"]  # one server left: no popup

            other.kill()
            local_before = local_line(await client.stats())["completed"]
            for _ in range(2):
                await client.complete(URI, *BLOCK_SPOT)  # answered by the local engine
            assert local_line(await client.stats())["completed"] == local_before + 2
            outage = [m.text for m in client.messages if m.kind == "show"]
            assert len(outage) == 1 and "no remote backend is reachable" in outage[0], outage
            assert "local engine serves" in outage[0]

            back = LlamaServerProcess(gguf_pair[0], port=owner.port, threads=1, ctx=2048,
                                      log_path=log_dir / "ring-back.log").start()
            await wait_healthy(client, owner_url)
            text, _ = await client.complete(URI, *BLOCK_SPOT)
            assert text.strip()
            lines = lines_by_url(await client.stats())
            assert lines[owner_url]["completed"] == 4  # the document is home again
            assert local_line(await client.stats())["completed"] == local_before + 2
    finally:
        for proc in (a, b, back):
            if proc is not None:
                proc.stop()
