"""inlineCompletion over stdio: capability, range, streaming, cancel, supersede, stats."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import PY_SOURCE, SERVER, init_params, tiny_options

URI = "file:///work/example.py"
STREAM = "specfill/streamCompletion"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, tiny_pair_dirs):
    lsp_client.streamed = []  # (monotonic time, params)

    @lsp_client.feature(STREAM)
    def on_stream(params):
        lsp_client.streamed.append((time.monotonic(), params))

    result = await lsp_client.initialize_session(init_params(tiny_options(*tiny_pair_dirs)))
    lsp_client.init_result = result
    lsp_client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=URI, language_id="python", version=1, text=PY_SOURCE)))
    yield
    await lsp_client.shutdown_session()


def inline_params(line: int, character: int, uri: str = URI) -> lsp.InlineCompletionParams:
    return lsp.InlineCompletionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        position=lsp.Position(line=line, character=character),
        context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Invoked))


def as_plain(value):
    """pygls hands back custom results as named tuples; tests want dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


async def stats(client: LanguageClient) -> dict:
    return as_plain(await client.protocol.send_request_async("specfill/stats", None))


async def wait_idle(client: LanguageClient, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        s = await stats(client)
        if s["engine"]["idle"] or time.monotonic() > deadline:
            return s
        await asyncio.sleep(0.02)


async def test_server_advertises_inline_completion(client: LanguageClient):
    assert client.init_result.capabilities.inline_completion_provider is not None
    assert client.init_result.server_info.name == "specfill"


async def test_completion_is_inserted_at_the_cursor_with_an_empty_range(client: LanguageClient):
    result = await client.text_document_inline_completion_async(inline_params(11, 8))
    assert isinstance(result, lsp.InlineCompletionList) and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.strip()
    assert item.range == lsp.Range(start=lsp.Position(11, 8), end=lsp.Position(11, 8))


async def test_text_streams_before_the_final_answer(client: LanguageClient):
    client.streamed.clear()
    result = await client.text_document_inline_completion_async(inline_params(5, 18))
    answered = time.monotonic()
    final = result.items[0].insert_text
    partial = [(t, p) for t, p in client.streamed if not p.done]
    assert len(partial) >= 2
    assert partial[0][0] < partial[-1][0] <= answered
    texts = [p.text for _, p in partial]
    assert all(final.startswith(t) for t in texts) and len(texts[0]) < len(final)
    done = [p for _, p in client.streamed if p.done]
    assert done and done[-1].text == final
    assert partial[0][1].uri == URI and partial[0][1].position.line == 5


async def wait_streamed(client: LanguageClient, timeout_s: float = 20.0) -> None:
    """Until the first stream notification: fails instead of hanging."""
    deadline = time.monotonic() + timeout_s
    while not client.streamed:
        assert time.monotonic() < deadline, f"no stream notification within {timeout_s} s"
        await asyncio.sleep(0.01)


def start_completion(client: LanguageClient, params, msg_id: str) -> asyncio.Future:
    """A request with our own id, so the test can send $/cancelRequest for it."""
    return asyncio.ensure_future(client.protocol.send_request_async(
        lsp.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id))


def set_max_tokens(client: LanguageClient, n: int) -> None:
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"specfill": {"maxNewTokens": n}}))


async def test_cancel_request_answers_cancelled_and_the_worker_goes_idle(client: LanguageClient):
    set_max_tokens(client, 4000)
    before = (await stats(client))["totals"]
    client.streamed.clear()
    task = start_completion(client, inline_params(11, 8), "cancel-me")
    await wait_streamed(client)  # generation is under way
    client.cancel_request(lsp.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcRequestCancelled):
        await task
    s = await wait_idle(client)
    assert s["engine"]["idle"]
    assert s["totals"]["cancelled"] == before["cancelled"] + 1
    # the cancelled request's tokens are counted, and it stopped well short of its budget
    assert 1 <= s["totals"]["generated_tokens"] - before["generated_tokens"] < 4000
    assert len(s["engine"]["abort_latencies_s"]) >= 1
    set_max_tokens(client, 48)


async def test_a_request_elsewhere_in_the_document_supersedes_the_running_one(client: LanguageClient):
    set_max_tokens(client, 4000)
    client.streamed.clear()
    first = start_completion(client, inline_params(11, 8), "superseded")
    await wait_streamed(client)
    set_max_tokens(client, 16)
    second = await client.text_document_inline_completion_async(inline_params(5, 18))
    with pytest.raises(JsonRpcRequestCancelled):
        await first
    assert second.items and second.items[0].insert_text.strip()
    set_max_tokens(client, 48)


async def test_the_same_request_twice_joins_one_generation(client: LanguageClient):
    before = (await stats(client))["totals"]["requests"]
    a, b = await asyncio.gather(
        client.text_document_inline_completion_async(inline_params(4, 4)),
        client.text_document_inline_completion_async(inline_params(4, 4)))
    assert a.items[0].insert_text == b.items[0].insert_text
    assert (await stats(client))["totals"]["requests"] == before + 1


async def test_invalid_settings_are_reported_and_replaced_by_defaults(client: LanguageClient):
    client.messages.clear()
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"specfill": {"temperature": "hot", "speculation": {"mode": "turbo"}}}))
    result = await client.text_document_inline_completion_async(inline_params(11, 8))
    assert result.items  # still serving
    texts = [m.message for m in client.messages]
    assert any("temperature must be a float" in t for t in texts)
    assert any("speculation.mode must be one of" in t for t in texts)


async def test_a_request_for_an_unopened_document_says_to_reopen_it(client: LanguageClient):
    client.messages.clear()
    result = await client.text_document_inline_completion_async(
        inline_params(0, 0, uri="file:///work/never-opened.py"))
    assert list(result.items) == []
    assert any("not open" in m.message for m in client.messages)


async def test_stats_add_up_with_the_completions(client: LanguageClient):
    await wait_idle(client)
    s0 = (await stats(client))["totals"]
    results = [await client.text_document_inline_completion_async(inline_params(line, ch))
               for line, ch in ((11, 8), (4, 4), (5, 18))]
    s = await stats(client)
    t = s["totals"]
    assert t["requests"] == s0["requests"] + 3
    assert t["completions"] + t["empty"] == s0["completions"] + s0["empty"] + 3
    assert t["accepted"] <= t["drafted"]
    assert t["generated_tokens"] > s0["generated_tokens"]
    last = s["last"]
    assert last["generated_tokens"] >= 1 and 0.0 <= last["acceptance_rate"] <= 1.0
    assert sum(c["requests"] for c in s["by_context"].values()) == t["requests"]
    assert all(r.items for r in results)
    assert 0 < s["first_window_tokens"] <= 1024  # sized by the prefill rate, within prefixTokens
