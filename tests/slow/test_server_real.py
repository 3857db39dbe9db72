"""The real server over stdio with the real default pair: a streamed completion of a real file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import SERVER, init_params
from tests.e2e.test_inline_completion import inline_params, stats

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory.py"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def real_client(lsp_client: LanguageClient, real_cache):
    lsp_client.streamed = []

    @lsp_client.feature("specfill/streamCompletion")
    def on_stream(params):
        lsp_client.streamed.append((time.monotonic(), params))

    # Fixed k: the draft runs whatever the round costs measured at load say. Where a verify
    # costs more than a draft step saves (an AVX2-only CPU) the adaptive controller drafts
    # nothing, and this test is about the real pair drafting and verifying through the server.
    await lsp_client.initialize_session(init_params({"readyTimeoutS": 300.0, "speculation": {"mode": "fixed"}}))
    lsp_client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(
        uri=EXAMPLE.as_uri(), language_id="python", version=1, text=EXAMPLE.read_text())))
    yield
    await lsp_client.shutdown_session()


async def test_real_pair_completes_a_method_body_through_the_server(real_client: LanguageClient):
    # line 27 is the empty body of `def total_value(self) -> float:` (8 spaces)
    result = await real_client.text_document_inline_completion_async(
        inline_params(27, 8, uri=EXAMPLE.as_uri()))
    assert result.items, "no completion"
    text = result.items[0].insert_text
    assert "return" in text and "self.items" in text
    assert "\ndef " not in text  # the block stop rule ended the method body
    s = await stats(real_client)
    assert s["last"]["generated_tokens"] >= 5
    assert s["totals"]["drafted"] >= s["totals"]["accepted"] > 0
    assert any(not p.done for _, p in real_client.streamed)
