"""Warming over stdio: didOpen and `specfill/warm` prefill a cursor's prompt in the
background, so the request that follows prefills a few tokens; a real request preempts
a running warm within about one layer; other open files' chunks keep typing cheap."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import PY_SOURCE, SERVER, init_params, tiny_options
from tests.e2e.test_inline_completion import inline_params, stats, wait_idle

URI = "file:///work/pkg/example.py"
HELPER_URI = "file:///work/pkg/helpers.py"
HELPER = '''def greeting_for(name, punctuation="!"):
    """The greeting shown to a user."""
    return "hello " + name + punctuation


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y
'''
# A document whose warm prefill is long enough to interrupt (warms feed chunks of 128 tokens).
BIG = "".join(f"def function_{i}(value):\n    return value * {i} + {i % 7}\n\n" for i in range(160))


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, tiny_pair_dirs):
    options = tiny_options(*tiny_pair_dirs, maxNewTokens=8,
                           contextWindow={"prefixTokens": 30000, "firstPrefixTokens": 30000,
                                          "extraTokens": 512})
    await lsp_client.initialize_session(init_params(options))
    await wait_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def wait_ready(client: LanguageClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (await stats(client))["engine"]["ready"]:
        assert time.monotonic() < deadline, "models not ready"
        await asyncio.sleep(0.05)


def open_doc(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))


def warm(client: LanguageClient, uri: str, line: int, character: int) -> None:
    client.protocol.notify("specfill/warm", {"textDocument": {"uri": uri},
                                             "position": {"line": line, "character": character}})


async def settle(client: LanguageClient) -> None:
    """The notifications just sent are taken up (their warms submitted), then done."""
    await asyncio.sleep(0.3)
    await wait_idle(client)


async def wait_warms(client: LanguageClient, done: int, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        s = await stats(client)
        if s["warms"]["warm"] >= done and s["engine"]["idle"]:
            return s
        assert time.monotonic() < deadline, f"warms: {s['warms']}"
        await asyncio.sleep(0.02)


async def test_did_open_warms_the_document_and_warm_moves_to_the_cursor(client: LanguageClient):
    before = (await stats(client))["warms"]["warm"]
    open_doc(client, URI, PY_SOURCE)
    s = await wait_warms(client, before + 1)  # the didOpen warm, at the end of the file
    assert s["warms"]["last"]["prefilled_tokens"] > 50
    warm(client, URI, 5, 18)
    s = await wait_warms(client, before + 2)
    # The cursor's prompt, loaded beside the end of the file's (they share only their first
    # FIM tokens here: cutting that prompt would save next to nothing).
    assert 0 < s["warms"]["last"]["prefilled_tokens"] <= s["warms"]["last"]["prompt_tokens"], s["warms"]
    result = await client.text_document_inline_completion_async(inline_params(5, 18, URI))
    assert result.items
    last = (await stats(client))["last"]
    assert last["prefilled_tokens"] <= 2, last  # the warm left the whole prompt cached


async def test_a_malformed_warm_is_ignored_and_the_server_serves_on(client: LanguageClient):
    open_doc(client, URI, PY_SOURCE)
    client.protocol.notify("specfill/warm", {"textDocument": {"uri": URI}, "position": {"line": -1}})
    client.protocol.notify("specfill/warm", {"position": "nowhere"})
    await wait_idle(client)
    result = await client.text_document_inline_completion_async(inline_params(11, 8, URI))
    assert result.items


async def test_a_request_preempts_a_running_warm_within_a_layer(client: LanguageClient):
    # The time a whole warm of BIG takes, undisturbed.
    before = (await stats(client))["warms"]["warm"]
    open_doc(client, URI, PY_SOURCE)
    open_doc(client, "file:///work/pkg/big_a.py", BIG)
    s = await wait_warms(client, before + 2)
    full_s = s["warms"]["last"]["prefill_s"]
    chunks = s["warms"]["last"]["prefilled_tokens"] / 128
    assert full_s > 0.2 and chunks >= 10, s["warms"]["last"]
    # Another big document (nothing shared): its warm is interrupted by a request.
    aborted = s["warms"]["aborted"]
    open_doc(client, "file:///work/pkg/big_b.py", BIG.replace("value", "number"))
    await asyncio.sleep(full_s / 4)
    assert not (await stats(client))["engine"]["idle"]  # the warm is running
    sent = time.monotonic()
    result = await client.text_document_inline_completion_async(inline_params(11, 8, URI))
    answered = time.monotonic() - sent
    assert result.items
    s = await stats(client)
    assert s["warms"]["aborted"] == aborted + 1
    preempt = s["engine"]["preempt_latencies_s"][-1]
    per_chunk = full_s / chunks  # 2 layers a chunk: an abort within a layer is under this
    assert preempt <= per_chunk + 0.05, (preempt, per_chunk)
    assert answered < full_s / 2, (answered, full_s)


async def test_other_open_files_lead_the_prompt_and_a_keystroke_prefills_few_tokens(
        client: LanguageClient):
    doc = "file:///work/pkg/uses_helpers.py"
    text = "from .helpers import greeting_for\n\n\ndef welcome(user):\n    return \n"
    open_doc(client, HELPER_URI, HELPER)
    open_doc(client, doc, text)
    await wait_idle(client)
    first = await client.text_document_inline_completion_async(inline_params(4, 11, doc))
    assert first.items
    last = (await stats(client))["last"]
    # the helper's definition (~30 tokens of a byte tokenizer per line) is in the prompt
    assert last["prompt_tokens"] > len(text) + len(HELPER.splitlines()[0]), last
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        lsp.VersionedTextDocumentIdentifier(uri=doc, version=2),
        [lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(4, 11), end=lsp.Position(4, 11)), text="g")]))
    await wait_idle(client)
    second = await client.text_document_inline_completion_async(inline_params(4, 12, doc))
    assert second.items
    last = (await stats(client))["last"]
    assert last["prompt_tokens"] > len(text)
    assert last["prefilled_tokens"] <= 4, last


async def test_with_the_package_head_a_file_opened_next_finds_the_open_files_head_cached(
        client: LanguageClient):
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"specfill": {"contextWindow": {"extraSources": "package", "extraTokens": 512}}}))
    try:
        open_doc(client, "file:///work/pkg/tab_helpers.py", HELPER)
        open_doc(client, "file:///work/pkg/tab_big.py", BIG)
        await wait_idle(client)  # the didOpen warms: the head of a file opened next, all of it
        doc, text = "file:///work/pkg/new_file.py", "def welcome(user):\n    return \n"
        open_doc(client, doc, text)
        await settle(client)  # its didOpen warm: the head of a file opened after it
        warm(client, doc, 1, 11)
        await settle(client)
        cursor_warm = (await stats(client))["warms"]["last"]
        result = await client.text_document_inline_completion_async(inline_params(1, 11, doc))
        assert result.items
        last = (await stats(client))["last"]
        assert last["prefilled_tokens"] <= 2, last
        # The outlines of both tabs lead the prompt, and the cursor's warm found them cached:
        # it prefilled the new file's part alone.
        assert last["prompt_tokens"] == cursor_warm["prompt_tokens"]
        assert last["prompt_tokens"] > len(text) + len(HELPER.splitlines()[0])
        assert cursor_warm["prefilled_tokens"] < len(text) + 32, cursor_warm  # + its path, markers
    finally:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"specfill": {"contextWindow": {"extraSources": "all"}}}))


async def test_a_short_first_window_grows_whole_while_the_user_rests(client: LanguageClient):
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"specfill": {"contextWindow": {"prefixTokens": 600, "firstPrefixTokens": 120}}}))
    try:
        doc = "file:///work/pkg/grows.py"
        open_doc(client, doc, BIG)
        first = await client.text_document_inline_completion_async(inline_params(300, 0, doc))
        short = (await stats(client))["last"]
        assert first.items is not None and short["prompt_tokens"] < 200  # the short window
        warm(client, doc, 300, 0)
        deadline = time.monotonic() + 30
        while (s := await stats(client))["warms"]["last"]["prompt_tokens"] <= 500 \
                or not s["engine"]["idle"]:  # the cursor's warm (cached), then the whole window's
            assert time.monotonic() < deadline, s["warms"]
            await asyncio.sleep(0.02)
        await client.text_document_inline_completion_async(inline_params(300, 0, doc))
        whole = (await stats(client))["last"]
        assert whole["prompt_tokens"] == s["warms"]["last"]["prompt_tokens"]
        assert whole["prefilled_tokens"] <= 2, whole  # grown in the background, not at the request
    finally:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"specfill": {"contextWindow": {"prefixTokens": 30000, "firstPrefixTokens": 30000}}}))
