"""Type-through on a real llama-server (issue 25, item 4): typing the first characters of a
suggestion the server streamed is answered from that stream, and the server is not asked
again; typing something else is a new request."""

from __future__ import annotations

import pytest

from lsp_server.client import SpecfillClient
from tests.remote.conftest import SOURCE, server

pytestmark = pytest.mark.remote
URI = "file:///work/geometry.py"


@pytest.fixture(scope="module")
def llama(gguf_pair, log_dir):
    with server(gguf_pair, log_dir, "type-through", draft=False, threads=2, ctx=4096) as proc:
        yield proc


def options(llama) -> dict:
    # warm off: only the completions reach the server, so its request count is theirs
    return {"backend": {"kind": "llama-server", "urls": [llama.url], "timeoutS": 120.0},
            "maxNewTokens": 24, "warm": False}


async def test_typing_what_the_server_streamed_is_answered_from_its_stream(llama):
    line, character = 8, 13  # after "    result = ": a line to complete, nothing after it
    async with SpecfillClient(options(llama)) as c:
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        shown, _ = await c.complete(URI, line, character)
        assert len(shown) >= 3, shown  # a one-line suggestion, ended by the server's "\n" stop
        (backend,) = (await c.stats())["backends"]
        assert backend["requests"] == 1
        c.insert(URI, 2, line, character, shown[:2])
        rest, timings = await c.complete(URI, line, character + 2)
        stats = await c.stats()
        assert rest == shown[2:]
        assert stats["reuse"]["remote_type_through"] == 1
        assert stats["backends"][0]["requests"] == 1  # not asked again
        assert timings.first_text_s is not None and timings.first_text_s < 0.5
        # Something the suggestion did not predict is a request of its own.
        c.insert(URI, 3, line, character + 2, "#")
        await c.complete(URI, line, character + 3)
        assert (await c.stats())["backends"][0]["requests"] == 2
