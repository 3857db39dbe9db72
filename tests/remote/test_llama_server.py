"""specfill in front of one real llama-server (target + `-md` draft, API key, TLS): streamed
completions over stdio, cancel -> the server's slot goes idle, draft and cache metering equal
to the server's own counters, the OpenAI-compatible route, a wrong key, an unknown CA."""

from __future__ import annotations

import asyncio
import time

import pytest
import trustme

from lsp_server.client import SpecfillClient
from tests.remote.conftest import BLOCK_SPOT, LINE_SPOT, SOURCE, server

pytestmark = pytest.mark.remote
KEY = "sk-test-remote-3141"
URI = "file:///work/shapes.py"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("tls")
    key_file, cert_file, ca_file = d / "key.pem", d / "cert.pem", d / "ca.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    ca.cert_pem.write_to_path(str(ca_file))
    return str(key_file), str(cert_file), str(ca_file)


@pytest.fixture(scope="module")
def llama(gguf_pair, log_dir, tls_files):
    proc = server(gguf_pair, log_dir, "main", draft=True, api_key=KEY, tls=tls_files,
                  threads=2, ctx=2048, draft_max=4)
    with proc:
        yield proc


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "api-key"
    path.write_text(KEY + "\n")
    return str(path)


def options(llama, key_file, ca_file, kind="llama-server", **backend) -> dict:
    return {"backend": {"kind": kind, "urls": [llama.url], "apiKeyFile": key_file,
                        "caFile": ca_file, "timeoutS": 120.0, **backend},
            "maxNewTokens": 8}


def backend_line(stats: dict) -> dict:
    (line,) = [b for b in stats["backends"] if b["kind"] != "local"]
    return line


async def wait_slot_idle(llama, timeout_s: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not any(s["is_processing"] for s in await asyncio.to_thread(llama.slots)):
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    raise AssertionError(f"slot still processing {timeout_s:.0f} s after the cancel")


@pytest.fixture(scope="module")
async def client(llama, key_file, tls_files):
    async with SpecfillClient(options(llama, key_file, tls_files[2])) as c:
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        yield c


async def test_streamed_completion_over_https_with_the_key(client):
    text, timings = await client.complete(URI, *BLOCK_SPOT)
    assert text.strip()
    streamed = [u for u in timings.updates if not u.done]
    assert streamed and text.startswith(streamed[0].text)
    assert timings.updates[-1].done and timings.updates[-1].text == text
    line = backend_line(await client.stats())
    assert line["requests"] >= 1 and line["completed"] >= 1
    assert line["prompt_tokens"] > 0 and line["completion_tokens"] > 0
    assert KEY not in str(await client.stats())


async def test_draft_and_cache_metering_equal_the_servers_counters(client, llama):
    client.configure({"maxNewTokens": 6})
    # An empty body, 6 tokens: the budget ends both requests on the server's side (no dedent
    # within 6 tokens for the client's block rule to cut), so the server reports on both.
    # Warms (didOpen, after each completion) run on the same server: counted apart, and
    # both sides read once they are over.
    assert await client.wait_idle(120)
    before_server = await asyncio.to_thread(llama.metrics)
    before = backend_line(await client.stats())
    for _ in range(2):  # the same spot twice: the second prompt comes from the slot's cache
        text, _ = await client.complete(URI, *BLOCK_SPOT)
        # The warm after a completion ends before the next request: a warm that gives way has
        # its answer (and so its numbers) cut off, as a request cut by the stop rule does.
        assert await client.wait_idle(120)
    after_server = await asyncio.to_thread(llama.metrics)
    after = backend_line(await client.stats())

    def delta(name):
        return after[name] - before[name]

    def server_delta(name):
        return after_server[name] - before_server[name]

    assert after["unreported"] == before["unreported"]  # the server finished both itself
    assert delta("draft_tokens") == server_delta("spec_decode_num_draft_tokens_total") > 0
    assert delta("accepted_draft_tokens") == server_delta("spec_decode_num_accepted_tokens_total")
    def warm_delta(name):
        return after["warms"].get(name, 0) - before["warms"].get(name, 0)

    assert warm_delta("aborted") == 0
    assert delta("completion_tokens") + warm_delta("generated_tokens") == server_delta("tokens_predicted_total")
    warm_evaluated = warm_delta("evaluated_prompt_tokens")
    assert delta("evaluated_prompt_tokens") == delta("prompt_tokens") - delta("cached_prompt_tokens")
    assert delta("evaluated_prompt_tokens") + warm_evaluated == server_delta("prompt_tokens_total")
    assert delta("cached_prompt_tokens") > 0
    s = await client.stats()
    assert s["totals"]["drafted"] >= delta("draft_tokens")  # the same counts in the totals
    client.configure({"maxNewTokens": 8})


async def test_cancel_closes_the_stream_and_the_slot_goes_idle(client, llama):
    client.configure({"maxNewTokens": 400})
    try:
        msg_id = client.next_id()
        first = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(client.complete(
            URI, *BLOCK_SPOT, msg_id, on_update=lambda u: first.done() or first.set_result(u)))
        await asyncio.wait_for(first, 120)
        client.cancel(msg_id)
        cancelled_at = time.monotonic()
        with pytest.raises(Exception, match="[Cc]ancel"):
            await task
        idle_after = await wait_slot_idle(llama)
        assert time.monotonic() - cancelled_at < 60
        line = backend_line(await client.stats())
        assert line["cancelled"] >= 1
        assert (await client.stats())["engine"]["idle"]
        print(f"cancel -> slot idle: {idle_after * 1000:.0f} ms")
    finally:
        client.configure({"maxNewTokens": 8})


async def test_openai_route_streams_and_reports_usage(llama, key_file, tls_files):
    async with SpecfillClient(options(llama, key_file, tls_files[2], kind="openai")) as c:
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        text, timings = await c.complete(URI, *BLOCK_SPOT)
        assert text.strip() and any(not u.done for u in timings.updates)
        line = backend_line(await c.stats())
        assert line["kind"] == "openai" and line["completed"] == 1
        assert line["prompt_tokens"] > 0 and line["completion_tokens"] > 0
        if line["unreported"].get("draft_tokens"):
            # No per-request draft counts on this route: the server-wide /metrics totals are
            # read instead, and they are the server's own.
            for _ in range(100):
                if (line := backend_line(await c.stats()))["server_counters"]:
                    break
                await asyncio.sleep(0.05)
            server = await asyncio.to_thread(llama.metrics)
            counters = line["server_counters"]
            assert counters["spec_decode_num_draft_tokens_total"] == server["spec_decode_num_draft_tokens_total"]
            assert counters["spec_decode_num_accepted_tokens_total"] == server["spec_decode_num_accepted_tokens_total"]
        else:
            assert line["draft_tokens"] > 0


async def test_a_wrong_key_gets_one_clear_message(llama, tmp_path, tls_files):
    wrong = tmp_path / "wrong-key"
    wrong.write_text("sk-wrong-2718\n")
    async with SpecfillClient(options(llama, str(wrong), tls_files[2])) as c:
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        for _ in range(2):
            text, _ = await c.complete(URI, *LINE_SPOT)
            assert text == ""
        shown = [m.text for m in c.messages if m.kind == "show"]
        refused = [m for m in shown if "refused the API key" in m]
        assert len(refused) == 1, shown
        assert "HTTP 401" in refused[0] and "backend.apiKey" in refused[0]
        assert "sk-wrong-2718" not in str(c.messages) and "sk-wrong-2718" not in c.stderr_text()
        assert backend_line(await c.stats())["errors"].get("auth", 0) >= 1


async def test_an_unknown_ca_is_refused_with_a_hint(llama, key_file):
    async with SpecfillClient(options(llama, key_file, "")) as c:  # system trust store only
        await c.wait_ready(30)
        c.open(URI, "python", SOURCE)
        text, _ = await c.complete(URI, *LINE_SPOT)
        assert text == ""
        shown = [m.text for m in c.messages if m.kind == "show"]
        assert any("TLS verification failed" in m and "backend.caFile" in m for m in shown), shown
