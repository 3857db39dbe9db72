"""Type-through on a remote stream (issue 25, item 4): a request whose document is the
running generation's plus text that generation streamed, typed at its cursor, follows that
stream instead of asking the server again. The real llama-server case is in
tests/remote/test_type_through_real.py."""

from __future__ import annotations

import asyncio

import pytest

from lsp_server.backends.prompt_text import TextCodec
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor
from lsp_server.completion.service import CompletionService
from lsp_server.completion.stats import ServerStats
from lsp_server.config import config_from_options
from lsp_server.engine.types import Finished, Stats, TextDelta

URI = "file:///w/a.py"
SOURCE = "def total(items):\n    \n"
ANSWER = "return sum(items)"


class ScriptedServer:
    """A backend that takes text prompts, as the remote ones do: it streams ANSWER a few
    characters every `step_s` and counts the requests it was sent."""

    load_error = None
    failed = None
    keeps_lineages = False  # a server: the service types through its stream

    def __init__(self, step_s: float = 0.02, reason: str = "max-tokens"):
        self.step_s, self.reason = step_s, reason
        self.prompts: list[str] = []
        self.aborted: list[str] = []

    async def wait_ready(self, timeout_s: float) -> bool:
        return True

    def codec(self):
        return TextCodec().as_prompt_codec()

    async def submit(self, request, on_final=None):
        self.prompts.append(request.prompt_text)
        text = ""
        for i in range(0, len(ANSWER), 3):
            await asyncio.sleep(self.step_s)
            text = ANSWER[:i + 3]
            yield TextDelta(request.id, text[i:], text)
        final = Finished(request.id, text, (), Stats(generated_tokens=len(text) // 3), self.reason)
        if on_final is not None:
            on_final(final)
        yield final

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def is_idle(self) -> bool:
        return True

    def warm_token_s(self) -> None:
        return None

    def preempt_background(self) -> None:
        pass


def service(temperature: float = 0.0, reason: str = "max-tokens"):
    config, problems = config_from_options({"temperature": temperature, "warm": False})
    assert not problems
    docs, updates = DocumentStore(), []
    docs.open(URI, "python", 1, SOURCE)
    server = ScriptedServer(reason=reason)
    stats = ServerStats()
    svc = CompletionService(docs, lambda: server, lambda: config, updates.append,
                            lambda *a, **k: None, stats)
    return svc, docs, server, updates, stats


def type_at(docs: DocumentStore, version: int, character: int, text: str) -> None:
    outcome = docs.change(URI, version, [(((1, character), (1, character)), text)])
    assert outcome.error is None and outcome.problem is None


async def first_text(updates: list, msg_id) -> str:
    while not any(u.requestId == msg_id for u in updates):
        await asyncio.sleep(0.002)
    return next(u.text for u in updates if u.requestId == msg_id)


async def test_typing_what_a_remote_stream_predicted_follows_it_without_a_new_request():
    svc, docs, server, updates, stats = service()
    first = asyncio.ensure_future(svc.complete(Cursor(URI, 1, 1, 4), "utf-16", "a"))
    await first_text(updates, "a")
    type_at(docs, 2, 4, "re")  # the first two characters of what it streamed
    second = asyncio.ensure_future(svc.complete(Cursor(URI, 2, 1, 6), "utf-16", "b"))
    shown = await first_text(updates, "b")  # what the stream held then, sent at once
    assert shown and ANSWER[2:].startswith(shown)
    first.cancel()  # the client drops the request it superseded: the stream goes on
    assert await second == ANSWER[2:]
    assert len(server.prompts) == 1 and server.aborted == []
    assert stats.reuse["remote_type_through"] == 1
    done = [u for u in updates if u.requestId == "b" and u.done]
    assert [(u.text, u.position) for u in done] == [(ANSWER[2:], {"line": 1, "character": 6})]
    with pytest.raises(asyncio.CancelledError):
        await first


@pytest.mark.parametrize("typed, at", [("rx", 4), ("re", 0)])
async def test_typing_anything_else_or_elsewhere_asks_the_server_again(typed, at):
    svc, docs, server, updates, stats = service()
    first = asyncio.ensure_future(svc.complete(Cursor(URI, 1, 1, 4), "utf-16", "a"))
    await first_text(updates, "a")
    type_at(docs, 2, at, typed)
    second = asyncio.ensure_future(svc.complete(Cursor(URI, 2, 1, at + 2), "utf-16", "b"))
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert len(server.prompts) == 2 and len(server.aborted) == 1
    assert stats.reuse["remote_type_through"] == 0


async def test_a_sampled_stream_is_not_joined():
    svc, docs, server, updates, stats = service(temperature=0.7)
    first = asyncio.ensure_future(svc.complete(Cursor(URI, 1, 1, 4), "utf-16", "a"))
    await first_text(updates, "a")
    type_at(docs, 2, 4, "re")
    second = asyncio.ensure_future(svc.complete(Cursor(URI, 2, 1, 6), "utf-16", "b"))
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert len(server.prompts) == 2 and stats.reuse["remote_type_through"] == 0


@pytest.mark.parametrize("reason, asked_again", [("eos", False), ("stop-rule", False), ("max-tokens", True)])
async def test_typing_what_an_ended_stream_predicted_is_answered_from_it_where_it_ended_by_itself(
        reason, asked_again):
    svc, docs, server, updates, stats = service(reason=reason)
    assert await svc.complete(Cursor(URI, 1, 1, 4), "utf-16", "a") == ANSWER
    type_at(docs, 2, 4, "re")
    answer = await svc.complete(Cursor(URI, 2, 1, 6), "utf-16", "b")
    # (asked again, the scripted server streams its one answer whatever the prompt)
    assert answer == (ANSWER if asked_again else ANSWER[2:])
    # a stream cut at its budget says nothing of what follows: a fresh request may go on
    assert len(server.prompts) == (2 if asked_again else 1)
    assert stats.reuse["remote_type_through"] == (0 if asked_again else 1)
