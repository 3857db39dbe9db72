"""Type-through and the next suggestion on accept, over stdio on the tiny pair: typing the
start of a shown suggestion, or accepting it, is answered from the generation that made
it (or the precompute that followed it), and every answer equals what a cold server
gives at the same document state."""

from __future__ import annotations

import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import SERVER, init_params, tiny_options
from tests.e2e.test_inline_completion import inline_params, stats, wait_idle

URI = "file:///work/adder.py"
SOURCE = "import os\n\n\ndef add(a, b):\n    total = a + b\n    return "
LINE, COL = 5, 11
COLD_URIS = iter(f"file:///work/cold_{i}.py" for i in range(100))


def options(dirs) -> dict:
    return tiny_options(*dirs, maxNewTokens=8)


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, tiny_pair_dirs):
    await lsp_client.initialize_session(init_params(options(tiny_pair_dirs)))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def cold(lsp_client: LanguageClient, tiny_pair_dirs):
    await lsp_client.initialize_session(init_params(
        options(tiny_pair_dirs) | {"warm": False, "precompute": False}))
    yield
    await lsp_client.shutdown_session()


def open_doc(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


def insert(client: LanguageClient, uri: str, version: int, line: int, character: int,
           text: str) -> None:
    here = lsp.Range(start=lsp.Position(line, character), end=lsp.Position(line, character))
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[lsp.TextDocumentContentChangePartial(range=here, text=text)]))


async def complete(client: LanguageClient, uri: str, line: int, character: int) -> str:
    result = await client.text_document_inline_completion_async(inline_params(line, character, uri))
    return result.items[0].insert_text if result.items else ""


async def cold_answer(cold: LanguageClient, text: str, line: int, character: int) -> str:
    """A fresh server's answer at this document state: nothing of it was generated before."""
    uri = next(COLD_URIS)
    open_doc(cold, uri, text)
    return await complete(cold, uri, line, character)


async def test_typing_the_suggestion_is_answered_from_its_generation(client, cold):
    open_doc(client, URI, SOURCE)
    shown = await complete(client, URI, LINE, COL)
    assert len(shown) >= 4
    await wait_idle(client)
    typed = shown[:2]
    insert(client, URI, 2, LINE, COL, typed)
    answer = await complete(client, URI, LINE, COL + len(typed))
    last = (await stats(client))["last"]
    assert last["known_source"] == "generation" and last["known_tokens"] > 0
    assert answer == await cold_answer(cold, SOURCE + typed, LINE, COL + len(typed))
    assert answer.startswith(shown[2:]) or shown[2:].startswith(answer)
    reuse = (await stats(client))["reuse"]
    assert reuse["answers_from_generation"] >= 1


async def test_accepting_the_suggestion_is_answered_from_the_precompute(client, cold):
    uri = "file:///work/accept.py"
    open_doc(client, uri, SOURCE)
    shown = await complete(client, uri, LINE, COL)
    assert shown
    await wait_idle(client)  # the precompute for "accepted all of it" ran to its end
    before = (await stats(client))["reuse"]
    assert before["precomputes"] >= 1 and before["background_tokens"] > 0
    insert(client, uri, 2, LINE, COL, shown)
    answer = await complete(client, uri, LINE, COL + len(shown))
    s = await stats(client)
    assert s["last"]["known_source"] == "background" and s["last"]["rounds"] == 0
    assert s["reuse"]["precomputed_hits"] == before["precomputed_hits"] + 1
    assert s["reuse"]["answers_known_in_full"] > before["answers_known_in_full"]
    assert answer == await cold_answer(cold, SOURCE + shown, LINE, COL + len(shown))


async def test_an_edit_elsewhere_discards_the_precompute_and_answers_fresh(client, cold):
    uri = "file:///work/diverge.py"
    open_doc(client, uri, SOURCE)
    shown = await complete(client, uri, LINE, COL)
    assert shown
    insert(client, uri, 2, LINE, COL, "zq")  # not what was suggested, while it may still run
    answer = await complete(client, uri, LINE, COL + 2)
    s = await stats(client)
    assert s["last"]["known_source"] != "background"
    assert s["reuse"]["precomputed_misses"] >= 1
    assert answer == await cold_answer(cold, SOURCE + "zq", LINE, COL + 2)
    await wait_idle(client)
    assert (await stats(client))["reuse"]["background_tokens_wasted"] <= \
        (await stats(client))["reuse"]["background_tokens"]


async def test_a_client_that_types_through_without_asking_still_finds_the_precompute(client, cold):
    # Neovim's client keeps its ghost text while the user types it and asks again only
    # after the accept: the typing must not drop the precompute.
    uri = "file:///work/quiet.py"
    open_doc(client, uri, SOURCE)
    shown = await complete(client, uri, LINE, COL)
    assert len(shown) >= 3
    insert(client, uri, 2, LINE, COL, shown[:1])
    insert(client, uri, 3, LINE, COL + 1, shown[1:2])
    await wait_idle(client)
    insert(client, uri, 4, LINE, COL + 2, shown[2:])  # Tab: the rest
    answer = await complete(client, uri, LINE, COL + len(shown))
    last = (await stats(client))["last"]
    assert last["known_source"] == "background" and last["rounds"] == 0
    assert answer == await cold_answer(cold, SOURCE + shown, LINE, COL + len(shown))
