"""The worker thread: streaming events, abort within one round, consumer cancellation."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from lsp_server.engine.cache import LeanSlot
from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule, TextDelta
from lsp_server.engine.worker import EngineWorker
from tests.tiny_models import CharTokenizer, tiny_model

torch.set_grad_enabled(False)
LONG = DraftPolicy(context="t", k_init=3, k_max=3, max_new_tokens=400, stop=StopRule("none"),
                   mode="fixed", draft_p_min=0.0, prompt_lookup=False)


def make_engine(_progress=None) -> SpeculativeEngine:
    return SpeculativeEngine(tiny_model(1), tiny_model(2, hidden=16, layers=1), CharTokenizer(),
                             stop_ids=[], options=EngineOptions(prefill_chunk=8))


class CountingForwards:
    """One count per forward pass (its embedding lookup), standard or lean."""

    def __init__(self, model):
        self.calls = 0
        model.get_input_embeddings().register_forward_hook(lambda *_: self._hit())

    def _hit(self):
        self.calls += 1


def test_abort_is_seen_before_the_next_target_forward():
    engine = make_engine()
    target_calls = CountingForwards(engine.target)
    flag = threading.Event()
    stream = engine.generate(CompletionRequest("a", (1, 2, 3), LONG), flag.is_set)
    first = next(stream)
    assert isinstance(first, TextDelta)
    flag.set()
    calls_at_abort = target_calls.calls
    rest = list(stream)
    assert isinstance(rest[-1], Finished) and rest[-1].reason == "aborted"
    assert target_calls.calls - calls_at_abort <= 1
    assert rest[-1].stats.generated_tokens < 400


def test_abort_during_a_long_prefill_stops_between_chunks():
    engine = make_engine()
    target_calls = CountingForwards(engine.target)
    polls = 0

    def abort_after_two_chunks() -> bool:
        nonlocal polls
        polls += 1
        return polls > 2

    prompt = tuple(i % 48 for i in range(200))  # 25 chunks of 8
    final = list(engine.generate(CompletionRequest("p", prompt, LONG), abort_after_two_chunks))[-1]
    assert final.reason == "aborted"
    assert target_calls.calls <= 3


async def test_worker_streams_deltas_then_a_final_result():
    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)
    policy = DraftPolicy(context="t", max_new_tokens=20, stop=StopRule("none"))
    events = [e async for e in worker.submit(CompletionRequest("w1", (4, 5, 6), policy))]
    assert isinstance(events[-1], Finished) and events[-1].reason == "max-tokens"
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2
    assert "".join(d.delta for d in deltas) == events[-1].text
    worker.stop()


async def test_cancelling_the_consumer_aborts_the_engine_and_the_worker_goes_idle():
    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)

    async def consume():
        async for _ in worker.submit(CompletionRequest("w2", (7, 8, 9), LONG)):
            pass

    task = asyncio.create_task(consume())
    for _ in range(2000):  # up to 20 s, then fail rather than hang
        if worker.busy.is_set():
            break
        await asyncio.sleep(0.01)
    assert worker.busy.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if worker.is_idle():
            break
        await asyncio.sleep(0.01)
    assert worker.is_idle()
    assert len(worker.abort_latencies_s) == 1
    worker.stop()


async def test_the_worker_is_not_idle_until_the_final_event_is_counted_on_the_loop():
    """A stats request reads is_idle() and the totals on the loop: idle must never show
    while the finished job's on_final is still queued behind it (a flaky e2e failure)."""
    import time

    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)
    counted = []
    policy = DraftPolicy(context="t", max_new_tokens=6, stop=StopRule("none"))
    stream = worker.submit(CompletionRequest("s1", (4, 5, 6), policy), on_final=counted.append)
    deadline = time.monotonic() + 20
    while not worker.busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.001)  # blocking on purpose: the loop runs no callback meanwhile
    while worker.busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not worker.busy.is_set()  # the worker thread is done with the job...
    assert not counted and not worker.is_idle()  # ...but its final is not counted yet
    events = [e async for e in stream]
    assert counted == [events[-1]] and worker.is_idle()
    worker.stop()


async def test_a_dying_worker_answers_the_running_job_and_the_queued_ones_once_each():
    class Crash(BaseException):  # not an Exception: generate's own error handling misses it
        pass

    class CrashingEngine:
        def generate(self, request, should_abort):
            yield TextDelta(request.id, "a", "a")
            raise Crash()

    worker = EngineWorker(lambda _progress: CrashingEngine())
    worker.start()
    assert await worker.wait_ready(30)
    policy = DraftPolicy(context="t", max_new_tokens=4, stop=StopRule("none"))
    counted = []
    streams = [worker.submit(CompletionRequest(f"d{i}", (1,), policy), on_final=counted.append)
               for i in range(3)]

    async def finals(stream):
        return [e for e in [e async for e in stream] if isinstance(e, Finished)]

    answers = await asyncio.wait_for(asyncio.gather(*map(finals, streams)), 10)
    assert [[f.reason for f in a] for a in answers] == [["error"]] * 3
    assert len(counted) == 3 and worker.failed == "Crash" and worker.is_idle()


async def test_a_failing_factory_reports_the_error_instead_of_hanging():
    def broken(_progress):
        raise FileNotFoundError("no model at /nowhere")

    worker = EngineWorker(broken)
    worker.start()
    assert not await worker.wait_ready(5)
    assert "no model at /nowhere" in worker.load_error
    final = [e async for e in worker.submit(CompletionRequest("x", (1,), DraftPolicy()))][-1]
    assert final.reason == "error" and "no model" in final.error
    worker.stop()


@pytest.mark.parametrize("lean", [True, False], ids=["lean-step", "transformers-forward"])
def test_an_abort_inside_a_forward_pass_leaves_a_consistent_reusable_cache(lean):
    from tests.unit.test_engine_greedy import plain_greedy

    engine = SpeculativeEngine(  # prefill chunks of 8 tokens, 2 decoder layers per model
        tiny_model(1), tiny_model(2, hidden=16, layers=1), CharTokenizer(), stop_ids=[],
        options=EngineOptions(prefill_chunk=8, lean_steps=lean))
    after = 0

    def abort_in_third_chunk() -> bool:
        nonlocal after
        # once two chunks are in: the check before the third, then its first layer's
        after += len(engine.pool.slots[0].ids) >= 16
        return after >= 2
    prompt = tuple(i % 48 for i in range(40))
    final = list(engine.generate(CompletionRequest("a", prompt, LONG), abort_in_third_chunk))[-1]
    assert final.reason == "aborted"
    slot = engine.pool.slots[0]
    assert len(slot.ids) == 16
    assert isinstance(slot, LeanSlot) == lean
    if lean:
        assert slot.kv.length == 16
    else:
        assert all(layer.get_seq_length() == 16 for layer in slot.cache.layers)
    short = DraftPolicy(context="t", k_init=3, k_max=3, max_new_tokens=12, stop=StopRule("none"),
                        mode="fixed", draft_p_min=0.0, prompt_lookup=False)
    again = list(engine.generate(CompletionRequest("b", prompt, short)))[-1]
    assert again.stats.prefilled_tokens == len(prompt) - 16
    assert list(again.token_ids) == plain_greedy(engine.target, list(prompt), 12)


async def test_the_idle_worker_hands_freed_heap_back_after_a_long_prefill_only(monkeypatch):
    from lsp_server.engine import heap

    trims = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1) or True)
    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)
    policy = DraftPolicy(context="t", max_new_tokens=2, stop=StopRule("none"))
    short = tuple(range(4, 20))
    long = tuple(i % 40 for i in range(heap.TRIM_AFTER_PREFILLED + 10))
    for name, prompt, want in (("short", short, 0), ("long", long, 1), ("again", long, 1)):
        events = [e async for e in worker.submit(CompletionRequest(name, prompt, policy))]
        assert events[-1].reason == "max-tokens"
        await asyncio.sleep(0.3)  # the trim runs on the worker thread just after the answer
        assert len(trims) == want, name  # "again": its prompt is cached, little prefilled
    worker.stop()


def test_trim_runs_where_glibc_has_malloc_trim():
    import sys

    from lsp_server.engine import heap

    assert heap.trim() is sys.platform.startswith("linux")


async def _until(condition, seconds: float = 20.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


async def test_preempting_stops_warms_at_once_and_only_a_real_requests_wait_is_measured():
    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)
    finals, streaming = [], set()

    async def warm(request_id: str) -> None:
        async for event in worker.submit(CompletionRequest(request_id, (7, 8, 9), LONG), warm=True):
            if isinstance(event, Finished):
                finals.append(event.reason)
            else:
                streaming.add(request_id)  # it runs on the worker

    first = asyncio.create_task(warm("warm-1"))
    assert await _until(lambda: "warm-1" in streaming)
    second = asyncio.create_task(warm("warm-2"))  # a newer warm supersedes it: nobody waits
    await first
    assert finals == ["aborted"] and not worker.preempt_latencies_s
    assert await _until(lambda: "warm-2" in streaming)
    worker.preempt_warms()  # a real request arrived: stop before its prompt is even built
    await second
    assert finals == ["aborted", "aborted"]
    assert len(worker.preempt_latencies_s) == 1
    worker.preempt_warms()  # nothing running: nothing to stop, nothing measured
    assert len(worker.preempt_latencies_s) == 1
    worker.stop()


async def test_aborting_the_running_job_stops_its_native_layer_step_and_the_next_job_runs_clean(monkeypatch):
    from lsp_server.kernels import native

    calls = []  # (thread, what): other tests' workers may still be winding down
    monkeypatch.setattr(native, "request_stop", lambda: calls.append((threading.get_ident(), "stop")))
    monkeypatch.setattr(native, "clear_stop", lambda: calls.append((threading.get_ident(), "clear")))
    worker = EngineWorker(make_engine)
    worker.start()
    assert await worker.wait_ready(30)
    streaming = set()

    def seen() -> list[str]:
        return [what for thread, what in calls if thread in (worker._thread.ident, threading.get_ident())]

    async def run(request_id: str) -> str:
        async for event in worker.submit(CompletionRequest(request_id, (7, 8, 9), LONG)):
            if isinstance(event, Finished):
                return event.reason
            streaming.add(request_id)
        return ""

    running = asyncio.create_task(run("r1"))
    assert await _until(lambda: "r1" in streaming)
    assert seen() == ["clear"]  # cleared when it started
    worker.abort("r1")
    assert await running == "aborted"
    assert seen()[:2] == ["clear", "stop"]  # it was running: stopped inside the layer too
    assert await _until(lambda: len(seen()) == 3) and seen()[2] == "clear"  # and cleared after it
    worker.abort("nobody")  # no such job: nothing stopped
    assert len(seen()) == 3
    worker.stop()


async def test_a_loaded_worker_keeps_its_models_out_of_the_collectors_full_passes():
    import gc

    gc.unfreeze()
    worker = EngineWorker(make_engine)
    worker.start()
    try:
        assert await worker.wait_ready(30)
        assert gc.get_freeze_count() > 0  # the loaded engine's objects among them
    finally:
        worker.stop()
        gc.unfreeze()
