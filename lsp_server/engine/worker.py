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
import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

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
    warm: bool = False
    preempted_at: float | None = None  # when a real request (or newer warm) aborted this warm


class EngineWorker:
    def __init__(self, factory: EngineFactory, threads: int | None = None):
        self._factory = factory
        self._threads = threads
        self._jobs: "queue.Queue[_Job | None]" = queue.Queue()
        self._active: dict[str, _Job] = {}
        self._lock = threading.Lock()
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

    def submit(self, request: CompletionRequest, warm: bool = False) -> AsyncIterator[EngineEvent]:
        job = _Job(request, asyncio.get_running_loop(), asyncio.Queue(), warm=warm)
        with self._lock:
            warms = [j for j in self._active.values() if j.warm]
            self._active[request.id] = job
        now = time.perf_counter()
        for old in warms:  # lowest priority: whatever comes next preempts them
            if not old.abort.is_set():
                old.preempted_at = now
                old.abort.set()
        self._jobs.put(job)
        return self._stream(job)

    def abort(self, request_id: str) -> None:
        with self._lock:
            job = self._active.get(request_id)
        if job is not None and not job.abort.is_set():
            job.aborted_at = time.perf_counter()
            job.abort.set()

    def stop(self) -> None:
        with self._lock:
            jobs = list(self._active.values())
        for job in jobs:
            job.abort.set()
        self._jobs.put(None)

    def is_idle(self) -> bool:
        return not self.busy.is_set() and self._jobs.empty()

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

    # -- worker thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._threads:
                import torch

                torch.set_num_threads(self._threads)
            self.engine = self._factory(self.load_progress.append)
            self.ready.set()
        except Exception as exc:  # surfaced to the user by the server, not raised here
            log.exception("model loading failed")
            self.load_error = f"{type(exc).__name__}: {exc}"
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self.busy.set()
            try:
                self._serve(job)
            finally:
                with self._lock:
                    self._active.pop(job.request.id, None)
                self.busy.clear()

    def _serve(self, job: _Job) -> None:
        def emit(event: EngineEvent) -> None:
            job.loop.call_soon_threadsafe(job.events.put_nowait, event)

        if job.abort.is_set() or self.engine is None:
            reason = "aborted" if job.abort.is_set() else "error"
            emit(Finished(job.request.id, "", (), Stats(stop_reason=reason), reason,
                          error=self.load_error))
            return
        try:
            for event in self.engine.generate(job.request, job.abort.is_set):
                emit(event)
                if isinstance(event, Finished) and job.preempted_at is not None:
                    self.preempt_latencies_s.append(time.perf_counter() - job.preempted_at)
                elif isinstance(event, Finished) and job.aborted_at is not None:
                    self.abort_latencies_s.append(time.perf_counter() - job.aborted_at)
        except Exception as exc:
            log.error("generation failed: %s", traceback.format_exc())
            emit(Finished(job.request.id, "", (), Stats(stop_reason="error"), "error",
                          error=f"{type(exc).__name__}: {exc}"))
