"""initialize answers at once; models load in the background with progress; early
requests wait a bounded time; bad models and bad settings are told to the user."""

from __future__ import annotations

import asyncio
import time

import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import PY_SOURCE, SERVER, init_params, tiny_options
from tests.e2e.test_inline_completion import inline_params, stats

URI = "file:///work/example.py"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def fresh(lsp_client: LanguageClient):
    yield


def open_doc(client: LanguageClient) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=URI, language_id="python", version=1, text=PY_SOURCE)))


async def test_early_request_answers_empty_with_a_reason_then_completions_work(
        fresh: LanguageClient, tiny_pair_dirs):
    t0 = time.monotonic()
    await fresh.initialize_session(init_params(tiny_options(*tiny_pair_dirs, readyTimeoutS=0.0)))
    assert time.monotonic() - t0 < 10  # initialize does not wait for the models
    open_doc(fresh)
    early = await fresh.text_document_inline_completion_async(inline_params(11, 8))
    assert list(early.items) == []
    assert any("still loading" in m.message for m in fresh.messages)
    fresh.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"specfill": {"readyTimeoutS": 60.0}}))
    later = await fresh.text_document_inline_completion_async(inline_params(11, 8))
    assert later.items and later.items[0].insert_text.strip()
    # Work-done progress reported the loading. Its end comes from a loop that polls the
    # worker every 0.1 s, so it may arrive just after a fast first completion.
    for _ in range(50):
        reports = [p for ps in fresh.progress_reports.values() for p in ps]
        if any(getattr(p, "kind", "") == "end" for p in reports):
            break
        await asyncio.sleep(0.1)
    assert any(getattr(p, "kind", "") == "end" for p in reports)
    await fresh.shutdown_session()


async def test_a_missing_model_is_reported_and_the_server_keeps_running(fresh: LanguageClient):
    await fresh.initialize_session(init_params(
        tiny_options("/nonexistent/model", "/nonexistent/draft", readyTimeoutS=30.0,
                     temperature="warm")))
    open_doc(fresh)
    result = await fresh.text_document_inline_completion_async(inline_params(11, 8))
    assert list(result.items) == []
    for _ in range(100):
        if any(m.type == lsp.MessageType.Error for m in fresh.messages):
            break
        await asyncio.sleep(0.05)
    texts = [m.message for m in fresh.messages]
    assert any("temperature must be a float" in t for t in texts)
    assert any("/nonexistent/model" in t and "specfill models fetch" in t for t in texts), texts
    s = await stats(fresh)
    assert s["engine"]["load_error"]
    await fresh.shutdown_session()
