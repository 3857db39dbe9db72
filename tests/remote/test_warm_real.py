"""Issue 26 against one real llama-server: other open files reach its prompt, a warm on
`specfill/warm` makes the next request a cache hit (the server's own `timings`), a real
request stops a warm and is answered, and a server that refuses warms gets none after saying
so once in the log."""

from __future__ import annotations

import asyncio
import time

import pytest

from lsp_server.client import SpecfillClient
from tests.remote.conftest import LINE_SPOT, SOURCE, server

pytestmark = pytest.mark.remote
KEY = "sk-test-warm-2718"
ROOT = "file:///work/pkg"
URI = f"{ROOT}/geometry.py"
NEIGHBOUR_URI = f"{ROOT}/shapes.py"
# Code like SOURCE's (its identifiers overlap): a window of it is picked as similar context.
NEIGHBOUR = "import math\n" + "".join(f'''

def circle_area_{i}(radius):
    result = math.pi * radius ** 2 + {i}
    return result
''' for i in range(12))


@pytest.fixture(scope="module")
def llama(gguf_pair, log_dir):
    with server(gguf_pair, log_dir, "warm", draft=False, api_key=KEY, threads=2, ctx=4096) as proc:
        yield proc


def options(llama, key_file, extra_tokens: int = 512) -> dict:
    return {"backend": {"kind": "llama-server", "urls": [llama.url], "apiKeyFile": key_file,
                        "timeoutS": 120.0},
            "contextWindow": {"extraTokens": extra_tokens}, "maxNewTokens": 4}


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    return str(path)


def backend_line(stats: dict) -> dict:
    (line,) = stats["backends"]
    return line


def warms_ended(line: dict) -> int:
    """Warms counted by how they ended (done, aborted, error), not their token counts."""
    amounts = {"steps", "evaluated_prompt_tokens", "cached_prompt_tokens", "generated_tokens"}
    return sum(n for key, n in line["warms"].items() if key not in amounts)


async def asked_after_a_warm(llama, key_file, extra_tokens: int) -> dict:
    async with SpecfillClient(options(llama, key_file, extra_tokens), root_uri=ROOT) as c:
        await c.wait_ready(30)
        c.open(NEIGHBOUR_URI, "python", NEIGHBOUR)
        c.open(URI, "python", SOURCE)
        c.warm(URI, *LINE_SPOT)
        assert await c.wait_idle(120)  # the warms are over
        await c.complete(URI, *LINE_SPOT)
        stats = await c.stats()
        return {"last": stats["last"], "backend": backend_line(stats), "warms": stats["warms"]}


async def test_a_warm_makes_the_next_request_a_cache_hit_with_the_open_files_in_the_prompt(
        llama, key_file):
    alone = await asked_after_a_warm(llama, key_file, extra_tokens=0)
    with_files = await asked_after_a_warm(llama, key_file, extra_tokens=512)
    for run in (alone, with_files):
        assert run["backend"]["warms"].get("warm", 0) >= 1 and run["warms"]["warm"] >= 1
        assert run["last"]["prefilled_tokens"] <= 16  # a warm hit, as the server counted it
        assert run["backend"]["last_request"]["evaluated_prompt_tokens"] == run["last"]["prefilled_tokens"]
    # The neighbour's chunks reached the server: hundreds of tokens more in the same prompt.
    assert with_files["last"]["prompt_tokens"] > alone["last"]["prompt_tokens"] + 200


async def test_a_real_request_stops_the_warm_under_way_and_is_answered(llama, key_file):
    long_file = "".join(f"value_{i} = compute({i}, scale={i % 7})\n" for i in range(400))
    async with SpecfillClient(options(llama, key_file), root_uri=ROOT) as c:
        await c.wait_ready(30)
        c.open(f"{ROOT}/long.py", "python", long_file)  # its didOpen warm: ~1,000 tokens
        c.open(URI, "python", SOURCE)
        text, _ = await c.complete(URI, *LINE_SPOT)
        assert await c.wait_idle(120)
        line = backend_line(await c.stats())
    assert line["completed"] == 1 and line["errors"] == {}
    assert line["warms"].get("aborted", 0) >= 1  # the long file's warm gave way


async def test_a_server_that_refuses_warms_gets_none_and_it_is_said_once(llama, tmp_path):
    wrong = tmp_path / "wrong-key"
    wrong.write_text("sk-not-the-key\n")
    log = tmp_path / "server.log"
    async with SpecfillClient(options(llama, str(wrong)), stderr_log=log, root_uri=ROOT) as c:
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        # The didOpen warm is refused before the next warm comes, so no warm supersedes
        # another (which would count it aborted) however fast the server reads its stdin.
        # An idle engine alone is not enough: the stats request can overtake the didOpen
        # warm, which then still runs when the next warm comes (seen once, 2026-12-04).
        deadline = time.monotonic() + 60
        while not warms_ended(backend_line(await c.stats())) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert await c.wait_idle(60)
        c.warm(URI, *LINE_SPOT)
        assert await c.wait_idle(60)
        c.warm(URI, *LINE_SPOT)
        assert await c.wait_idle(60)
        line = backend_line(await c.stats())
        popups = [m for m in c.messages if "warm" in m.text]
    assert line["warming"].startswith("off: ") and line["warms"] == {
        "error": 1, "steps": 0, "evaluated_prompt_tokens": 0, "cached_prompt_tokens": 0,
        "generated_tokens": 0}
    assert popups == []  # a warm never pops a message
    assert log.read_text().count("refused a cache warm-up") == 1
