"""One thread owns the models: `submit(request) -> async stream of events`, `abort(id)`.

The asyncio side never touches a tensor. Events cross back with
`loop.call_soon_threadsafe`; a consumer that goes away calls `abort`, and the engine
sees the flag between draft steps, before verification and between prefill chunks.

Warms (`submit(..., warm=True)`, a request with max_new_tokens 0) load a prompt into the
KV cache while the user is not waiting. They run at the lowest priority: any real request
aborts every warm at once (the engine sees the flag within one decoder layer, and the
chunks already fed stay cached), and a newer warm supersedes an older one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import contextmanager
import gc
import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterator

from ..kernels import native
from . import heap
from .types import CompletionRequest, EngineEvent, Finished, Stats

log = logging.getLogger(__name__)

# Built on the worker thread so that torch is imported and models live there only.
EngineFactory = Callable[[Callable[[str], None]], "object"]


@dataclass
class _Job:
    request: CompletionRequest
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    abort: threading.Event = field(default_factory=threading.Event)
    aborted_at: float | None = None
    # Called on the loop with the final event, before the stream sees it, even when the
    # consumer left early: the engine work of cancelled requests is counted too.
    on_final: Callable[[Finished], None] | None = None
    warm: bool = False
    preempted_at: float | None = None  # when a real request aborted this warm
    settled: bool = False  # its final event was delivered (set on the loop only)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cycle collection while the models load: the objects made are meant to live."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def freeze_loaded_objects() -> None:
    """Keep what loading made out of the cycle collector's full passes. The loaded pair
    leaves ~520,000 tracked objects, and a full pass over them took 200-250 ms on an AMD
    EPYC Zen 4 (measured in a `bench lsp --session accept` run: one landed mid-session, a
    keystroke's answer waiting on it; 0.01 ms once frozen). A reload unfreezes first, so
    the replaced models' cycles are still collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class EngineWorker:
    def __init__(self, factory: EngineFactory, threads: int | None = None):
        self._factory = factory
        self._threads = threads
        self._applied_threads: int | None = None
        self.threads_in_use: int | None = None  # torch's count on the worker thread, once set
        self._default_threads: int | None = None
        self._jobs: "queue.Queue[_Job | None]" = queue.Queue()
        self._active: dict[str, _Job] = {}
        self._running: _Job | None = None  # the job on the worker thread now
        self._lock = threading.Lock()
        self._stopped = False
        # Why this worker stopped serving on its own (a kernel raised, the thread died): the
        # engine's caches may be half-written, so the server starts a fresh worker.
        self.failed: str | None = None
        self.engine = None
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.load_progress: list[str] = []
        self.busy = threading.Event()  # set while a request runs on the worker
        # abort -> engine idle, newest last; bounded so a long session does not grow it
        self.abort_latencies_s: deque[float] = deque(maxlen=1000)
        # a real request's arrival -> the warm it preempted has stopped, newest last
        self.preempt_latencies_s: deque[float] = deque(maxlen=1000)
        self._thread = threading.Thread(target=self._run, name="specfill-engine", daemon=True)

    # -- asyncio side -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    async def wait_ready(self, timeout_s: float) -> bool:
        """True when the models are loaded; False on timeout or load failure."""
        deadline = time.monotonic() + timeout_s
        while not self.ready.is_set() and self.load_error is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return self.ready.is_set()

    def submit(self, request: CompletionRequest,
               on_final: Callable[[Finished], None] | None = None,
               warm: bool = False) -> AsyncIterator[EngineEvent]:
        job = _Job(request, asyncio.get_running_loop(), asyncio.Queue(), on_final=on_final, warm=warm)
        with self._lock:
            if self._stopped:  # failed, or a reload replaced it: answer at once, never queue
                job.abort.set()
                reason = "error" if self.failed else "aborted"
                job.events.put_nowait(Finished(request.id, "", (), Stats(stop_reason=reason),
                                               reason, error=self.failed))
                return self._stream(job)
            warms = [j for j in self._active.values() if j.warm]
            self._active[request.id] = job
            self._jobs.put(job)
        self._preempt(warms, by_request=not warm)  # lowest priority: whatever comes next preempts them
        return self._stream(job)

    def preempt_warms(self) -> None:
        """A real request has arrived: stop background work now, before its prompt is built.
        The kernels release the GIL, so a warm's layer and the prompt building on the event
        loop would otherwise share the two cores (three threads): on an AMD EPYC a 16-row
        layer then took 15-19 ms instead of 3.3, and the warm stopped only after that."""
        with self._lock:
            warms = [j for j in self._active.values() if j.warm]
        self._preempt(warms)

    def _preempt(self, warms: list[_Job], by_request: bool = True) -> None:
        """Abort these warms; `by_request`: for a real request, whose wait for them to stop is
        measured (a newer warm superseding an older one delays nobody)."""
        now = time.perf_counter()
        for job in warms:
            if not job.abort.is_set():
                job.preempted_at = now if by_request else None
                self._abort_job(job)

    def abort(self, request_id: str) -> None:
        with self._lock:
            job = self._active.get(request_id)
        if job is not None and not job.abort.is_set():
            job.aborted_at = time.perf_counter()
            self._abort_job(job)

    def _abort_job(self, job: _Job) -> None:
        """The engine sees `abort` between layers; the job now running is also stopped inside
        its native layer step, between the layer's products or inside one (native.request_stop)."""
        job.abort.set()
        with self._lock:
            if job is self._running:
                native.request_stop()

    def set_threads(self, threads: int | None) -> None:
        """torch's CPU thread count (None or 0: torch's own default), applied on the worker
        thread before its next request; no reload needed."""
        self._threads = threads or None

    def stop(self) -> None:
        """Abort every job, queued ones included (each still gets its Finished), and end
        the thread after them."""
        with self._lock:
            self._stopped = True
            jobs = list(self._active.values())
            self._jobs.put(None)
        for job in jobs:
            self._abort_job(job)

    def active_jobs(self) -> int:
        with self._lock:
            return len(self._active)

    def is_idle(self) -> bool:
        """No job queued, running or still being settled on the loop (a job stays active
        from submit to its settling): once this is True, every finished job's on_final has
        run, so stats read next to it add up."""
        with self._lock:
            return not self._active

    async def _stream(self, job: _Job) -> AsyncIterator[EngineEvent]:
        finished = False
        try:
            while not finished:
                event = await job.events.get()
                finished = isinstance(event, Finished)
                yield event
        finally:
            if not finished:  # the consumer went away (cancelled) before the end
                self.abort(job.request.id)

    def _settle(self, job: _Job, final: Finished) -> None:
        """On the loop: count the job's work, hand its stream the final event, and only then
        forget it. Done here rather than on the worker thread so that a stats request can
        never see the worker idle while the job's on_final is still queued. A job is
        settled once: a dying worker answers every job still active, and one of them may
        have its own final already on the way."""
        if job.settled:
            return
        job.settled = True
        try:
            if job.on_final is not None:
                job.on_final(final)
            job.events.put_nowait(final)
        finally:
            with self._lock:
                if self._active.get(job.request.id) is job:
                    del self._active[job.request.id]

    # -- worker thread ------------------------------------------------------------

    def _run(self) -> None:
        native.listen_for_stops(True)  # this thread's native layer steps honour _abort_job
        try:
            self._apply_threads()
            with collector_paused():  # else 8 full passes of 107-234 ms each (AMD EPYC Zen 4)
                self.engine = self._factory(self.load_progress.append)
                freeze_loaded_objects()  # before the collector resumes: one pass, not two
            self.ready.set()
        except Exception as exc:  # surfaced to the user by the server, not raised here
            log.exception("model loading failed")
            self.load_error = f"{type(exc).__name__}: {exc}"
        try:
            self._serve_jobs()
        except BaseException as exc:  # the loop itself broke: answer everyone, then stop
            log.error("engine worker died: %s\n%s", type(exc).__name__, traceback.format_exc())
            self._fail(type(exc).__name__)
            with self._lock:  # the job that was running and every queued one
                jobs = list(self._active.values())
            for job in jobs:
                if not job.loop.is_closed():
                    job.loop.call_soon_threadsafe(self._settle, job, Finished(
                        job.request.id, "", (), Stats(stop_reason="error"), "error", error=self.failed))

    def _serve_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                if self._jobs.empty():
                    return
                continue  # jobs queued before stop(): aborted, each answered below
            self.busy.set()
            with self._lock:  # a stop asked for the job before this one is not for this one
                self._running = job
                native.clear_stop()
            try:
                self._apply_threads()
                prefilled = self._serve(job)
            finally:
                with self._lock:
                    self._running = None
                    native.clear_stop()
                if job.loop.is_closed():  # nobody left to settle it
                    with self._lock:
                        self._active.pop(job.request.id, None)
                self.busy.clear()
            if prefilled >= heap.TRIM_AFTER_PREFILLED and self._jobs.empty():
                heap.trim()  # idle now: nobody waits for it

    def _fail(self, reason: str) -> None:
        """Stop serving: the jobs still queued are answered at once (aborted)."""
        with self._lock:
            if self.failed is None:
                self.failed = reason
        self.stop()

    def _apply_threads(self) -> None:
        wanted = self._threads
        if wanted == self._applied_threads:
            return
        apply = getattr(self.engine, "apply_threads", None)  # a loaded runtime knows its kernels
        if apply is not None:
            self.threads_in_use = apply(wanted)
            self._applied_threads = wanted
            return
        import torch

        if self._default_threads is None:
            self._default_threads = torch.get_num_threads()
        torch.set_num_threads(wanted or self._default_threads)
        self._applied_threads = wanted
        self.threads_in_use = torch.get_num_threads()

    def _serve(self, job: _Job) -> int:
        """Run one job to its Finished; returns the tokens it prefilled."""
        prefilled = 0

        def emit(event: EngineEvent) -> None:
            nonlocal prefilled
            if isinstance(event, Finished):
                prefilled = event.stats.prefilled_tokens
            if job.loop.is_closed():
                return  # the server is gone; nobody is left to tell
            if isinstance(event, Finished):
                job.loop.call_soon_threadsafe(self._settle, job, event)
            else:
                job.loop.call_soon_threadsafe(job.events.put_nowait, event)

        if job.abort.is_set() or self.engine is None:
            reason = "aborted" if job.abort.is_set() else "error"
            emit(Finished(job.request.id, "", (), Stats(stop_reason=reason), reason,
                          error=self.load_error))
            return prefilled
        try:
            for event in self.engine.generate(job.request, job.abort.is_set):
                # measured before the answer is sent, so whoever reads it finds the figure
                if isinstance(event, Finished) and job.preempted_at is not None:
                    self.preempt_latencies_s.append(time.perf_counter() - job.preempted_at)
                elif isinstance(event, Finished) and job.aborted_at is not None:
                    self.abort_latencies_s.append(time.perf_counter() - job.aborted_at)
                emit(event)
        except Exception as exc:
            log.error("generation failed: %s", traceback.format_exc())
            error = f"{type(exc).__name__}: {exc}"
            self._fail(error)  # before the answer, so whoever reads it sees `failed`
            emit(Finished(job.request.id, "", (), Stats(stop_reason="error"), "error", error=error))
        return prefilled
