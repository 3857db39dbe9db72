"""CompletionService over a real EngineWorker and DocumentStore, with a scripted engine in
place of the models: every request's stream ends with exactly one done:true under its own
id (success, error, cancel, supersede, joined), and cancelled work is counted in stats."""

from __future__ import annotations

import asyncio
import time

import pytest

from lsp_server.backends.local import LocalBackend
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor
from lsp_server.completion.service import CompletionService
from lsp_server.completion.stats import ServerStats
from lsp_server.config import Config
from lsp_server.context.prompt import FimTokens
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, Stats, TextDelta
from lsp_server.engine.worker import EngineWorker

URI = "file:///a.py"
SOURCE = "def f(x):\n    return x\n\n\ndef g(y):\n    \n"


class ScriptedEngine:
    """Emits one token ('ab' per step) every 5 ms until aborted, `steps` run out, or
    `fail_after` steps (then raises, like a kernel error)."""

    fim = FimTokens(1, 2, 3)

    def __init__(self, steps: int = 10_000, fail_after: int | None = None):
        self.steps, self.fail_after = steps, fail_after

    def encode(self, text: str) -> list[int]:
        return [10 + ord(c) % 200 for c in text]

    def generate(self, request, should_abort=lambda: False):
        text = ""
        for step in range(self.steps):
            if should_abort():
                yield Finished(request.id, text, (), Stats(generated_tokens=step), "aborted")
                return
            if self.fail_after is not None and step == self.fail_after:
                raise RuntimeError("kernel exploded")
            text += "ab"
            yield TextDelta(request.id, "ab", text)
            time.sleep(0.005)
        yield Finished(request.id, text, (), Stats(generated_tokens=self.steps), "max-tokens")


class Harness:
    def __init__(self, engine: ScriptedEngine):
        self.updates: list = []
        self.popups: list[str] = []
        self.stats = ServerStats()
        self.documents = DocumentStore()
        self.documents.open(URI, "python", 1, SOURCE)
        self.worker = EngineWorker(lambda _progress: engine)
        self.worker.start()
        self.backend = LocalBackend(self.worker)
        self.service = CompletionService(
            self.documents, lambda: self.backend, lambda: Config(), self.updates.append,
            lambda message, *a, **k: self.popups.append(message), self.stats)

    def complete(self, msg_id, line=5, character=4) -> asyncio.Task:
        return asyncio.ensure_future(
            self.service.complete(Cursor(URI, 0, line, character), "utf-16", msg_id))

    def done_for(self, msg_id) -> list:
        return [u for u in self.updates if u.requestId == msg_id and u.done]

    async def wait_streaming(self, msg_id, timeout_s=5.0):
        deadline = time.monotonic() + timeout_s
        while not any(u.requestId == msg_id for u in self.updates):
            assert time.monotonic() < deadline, "no stream update arrived"
            await asyncio.sleep(0.005)

    async def wait_idle(self, timeout_s=5.0):
        deadline = time.monotonic() + timeout_s
        while not self.worker.is_idle() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # the final event's callback runs on the loop
        assert self.worker.is_idle()


@pytest.fixture
async def make():
    harnesses = []

    def build(**kw) -> Harness:
        h = Harness(ScriptedEngine(**kw))
        harnesses.append(h)
        return h

    yield build
    for h in harnesses:
        h.worker.stop()


async def test_a_finished_generation_ends_its_stream_once_with_the_answer(make):
    h = make(steps=5)
    assert await h.complete(1) == "ab" * 5
    assert [u.text for u in h.done_for(1)] == ["ab" * 5]


async def test_an_engine_error_ends_the_stream_with_done_and_fails_the_worker(make):
    h = make(fail_after=3)
    other = "file:///b.py"
    h.documents.open(other, "python", 1, SOURCE)
    queued = asyncio.ensure_future(h.service.complete(Cursor(other, 0, 1, 4), "utf-16", 8))
    assert await h.complete(7) is None
    done = h.done_for(7)
    assert len(done) == 1 and done[0].text == ""
    assert h.worker.failed == "RuntimeError: kernel exploded"
    assert await asyncio.wait_for(queued, 2) is None  # queued behind it: answered at once
    assert len(h.done_for(8)) == 1
    assert h.popups == []  # the server's restart notice is the one message
    assert h.stats.totals.errors >= 1


async def test_a_cancelled_request_gets_one_done_and_its_engine_work_is_counted(make):
    h = make()
    task = h.complete("c")
    await h.wait_streaming("c")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await h.wait_idle()
    assert [u.text for u in h.done_for("c")] == [""]
    assert h.stats.totals.cancelled == 1
    assert h.stats.totals.generated_tokens >= 1  # the tokens made before the cancel


async def test_a_joining_request_streams_under_its_own_id(make):
    h = make(steps=40)
    first = h.complete("first")
    await h.wait_streaming("first")
    second = h.complete("second")
    await h.wait_streaming("second")
    a, b = await asyncio.gather(first, second)
    assert a == b == "ab" * 40
    assert h.stats.totals.requests == 1  # one generation for both
    assert len(h.done_for("first")) == 1 and len(h.done_for("second")) == 1
    late = [u for u in h.updates if u.requestId == "second" and not u.done]
    assert late and all(u.text.startswith("ab") for u in late)


async def test_one_of_two_joined_requests_cancelled_leaves_the_other_running(make):
    h = make(steps=60)
    first, second = h.complete("x"), h.complete("y")
    await h.wait_streaming("x")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == "ab" * 60
    assert [u.text for u in h.done_for("x")] == [""]
    assert [u.text for u in h.done_for("y")] == ["ab" * 60]


async def test_a_superseded_generation_ends_its_stream(make):
    h = make(steps=400)
    old = h.complete("old", 5, 4)
    await h.wait_streaming("old")
    new = h.complete("new", 1, 4)
    with pytest.raises(asyncio.CancelledError):
        await old
    new.cancel()
    with pytest.raises(asyncio.CancelledError):
        await new
    assert [u.text for u in h.done_for("old")] == [""]
    assert len(h.done_for("new")) == 1


class AbortWitness(ScriptedEngine):
    """Records, at each encode, whether the generation running then had been told to stop."""

    def __init__(self):
        super().__init__()
        self.running = None
        self.stopped_at_encode: list[bool] = []

    def generate(self, request, should_abort=lambda: False):
        self.running = should_abort
        yield from super().generate(request, should_abort)

    def encode(self, text: str) -> list[int]:
        if self.running is not None:
            self.stopped_at_encode.append(self.running())
        return super().encode(text)


async def test_a_superseded_generation_is_stopped_before_the_new_prompt_is_built():
    engine = AbortWitness()
    h = Harness(engine)
    try:
        old = h.complete("old", 5, 4)
        await h.wait_streaming("old")
        new = h.complete("new", 1, 4)
        with pytest.raises(asyncio.CancelledError):
            await old
        # the new prompt was counted while the old generation already had its stop: the
        # model's cores were free for it (a type-through answer needs no model call)
        assert engine.stopped_at_encode and all(engine.stopped_at_encode)
        new.cancel()
        with pytest.raises(asyncio.CancelledError):
            await new
    finally:
        h.worker.stop()


class ThreadRecorder(ScriptedEngine):
    def __init__(self):
        super().__init__(steps=1)
        self.seen: list[int] = []

    def generate(self, request, should_abort=lambda: False):
        import torch

        self.seen.append(torch.get_num_threads())
        yield from super().generate(request, should_abort)


async def test_a_thread_count_change_applies_before_the_next_request_and_0_restores_the_default():
    engine = ThreadRecorder()
    worker = EngineWorker(lambda _p: engine)
    worker.start()
    try:
        assert await worker.wait_ready(5)
        def request(n: int) -> CompletionRequest:
            return CompletionRequest(f"t{n}", (1, 2), DraftPolicy())

        [e async for e in worker.submit(request(0))]
        default = engine.seen[-1]
        worker.set_threads(3)
        [e async for e in worker.submit(request(1))]
        assert engine.seen[-1] == 3 and worker.threads_in_use == 3
        worker.set_threads(0)
        [e async for e in worker.submit(request(2))]
        assert engine.seen[-1] == default
    finally:
        worker.stop()


async def test_stopping_the_worker_answers_its_queued_jobs_and_later_submits_at_once():
    worker = EngineWorker(lambda _p: ScriptedEngine(steps=400))
    worker.start()
    assert await worker.wait_ready(5)

    async def final(n: int) -> Finished:
        return [e async for e in worker.submit(CompletionRequest(f"q{n}", (1,), DraftPolicy()))][-1]

    tasks = [asyncio.ensure_future(final(n)) for n in range(3)]
    for _ in range(1000):
        if worker.busy.is_set():
            break
        await asyncio.sleep(0.005)
    worker.stop()  # what a model reload does to the old worker
    done = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert [f.reason for f in done] == ["aborted"] * 3
    late = await asyncio.wait_for(final(9), 1)
    assert late.reason == "aborted"
