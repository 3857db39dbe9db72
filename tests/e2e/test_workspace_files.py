"""Over stdio: with `contextWindow.workspaceFiles` on, a module the file imports goes into
the prompt though it was never opened; a file outside the workspace folder never does."""

from __future__ import annotations

from pathlib import Path

import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import SERVER, init_params, tiny_options
from tests.e2e.test_inline_completion import inline_params, stats, wait_idle
from tests.e2e.test_warm import open_doc, wait_ready

HELPER = '''def greeting_for(name, punctuation="!"):
    """The greeting shown to a user."""
    return "hello " + name + punctuation
'''
TEXT = "from .helpers import greeting_for\n\n\ndef welcome(user):\n    return \n"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / "pkg").mkdir()
    (root / "pkg" / "helpers.py").write_text(HELPER)  # on disk only: never opened
    (root / "pkg" / "app.py").write_text(TEXT)
    outside = tmp_path_factory.mktemp("outside")
    (outside / "helpers.py").write_text(HELPER)
    (outside / "app.py").write_text(TEXT)
    lsp_client.root, lsp_client.outside = root, outside
    options = tiny_options(*tiny_pair_dirs, maxNewTokens=4, warm=False,
                           contextWindow={"extraTokens": 512, "workspaceFiles": True})
    params = init_params(options)
    params.workspace_folders = [lsp.WorkspaceFolder(uri=root.as_uri(), name="workspace")]
    await lsp_client.initialize_session(params)
    await wait_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def prompt_tokens(client: LanguageClient, path: Path) -> int:
    uri = path.as_uri()
    open_doc(client, uri, TEXT)
    result = await client.text_document_inline_completion_async(inline_params(4, 11, uri))
    assert result is not None
    await wait_idle(client)
    # closed unedited, so it is no open-file context for the next one
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    return (await stats(client))["last"]["prompt_tokens"]


async def test_an_imported_module_on_disk_leads_the_prompt_only_inside_the_workspace(
        client: LanguageClient):
    inside = await prompt_tokens(client, client.root / "pkg" / "app.py")
    outside = await prompt_tokens(client, client.outside / "app.py")
    # the helper's definition (~40 tokens a line for the tiny byte tokenizer) is in front
    assert inside > outside + len(HELPER.splitlines()[0]), (inside, outside)
