"""The local engine behind the backend interface: a thin adapter over the worker thread."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from functools import lru_cache
from typing import Any, AsyncIterator, Callable

from lsp_server.backends.base import BackendRequest, BackendStatus, PromptCodec, WarmEnd
from lsp_server.engine.types import EngineEvent, Finished
from lsp_server.engine.worker import EngineWorker

log = logging.getLogger(__name__)


class LocalBackend:
    keeps_lineages = True  # the engine's lineages (engine/lineage.py), its KV slots by token prefix

    def __init__(self, worker: EngineWorker):
        self.worker = worker
        self.requests = 0
        self.completed = 0
        self._encoder: tuple[Any, Callable[[str], list[int]]] | None = None  # (runtime, encode)
        self._warms: set[asyncio.Task] = set()

    @property
    def load_error(self) -> str | None:
        return self.worker.load_error

    @property
    def failed(self) -> str | None:
        """Why the worker failed (a kernel raised, its thread died): the server restarts it."""
        return self.worker.failed

    async def wait_ready(self, timeout_s: float) -> bool:
        return await self.worker.wait_ready(timeout_s)

    def codec(self) -> PromptCodec:
        runtime = self.worker.engine  # lsp_server.backends.local_runtime.Runtime once loaded
        return PromptCodec(self._encode_for(runtime), runtime.fim, repo=getattr(runtime, "repo", None))

    def _encode_for(self, runtime: Any) -> Callable[[str], list[int]]:
        """The runtime's encode, remembering recent pieces: between two keystrokes the prompt
        builder encodes mostly the same windows again (half the time of a type-through
        answer on a 9 KB file went there)."""
        if self._encoder is None or self._encoder[0] is not runtime:
            cached = lru_cache(maxsize=128)(lambda text: tuple(runtime.encode(text)))
            self._encoder = (runtime, lambda text: list(cached(text)))  # callers may own the list
        return self._encoder[1]

    async def submit(self, request: BackendRequest,
                     on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        self.requests += 1
        stream = self.worker.submit(request.request, on_final)
        try:
            async for event in stream:
                if isinstance(event, Finished) and event.reason != "aborted":
                    self.completed += 1
                yield event
        finally:
            await stream.aclose()  # a consumer that stopped early aborts the engine now

    def abort(self, request_id: str) -> None:
        self.worker.abort(request_id)

    def is_idle(self) -> bool:
        return self.worker.is_idle() and not any(not task.done() for task in self._warms)

    def _engine(self) -> Any:
        """The loaded runtime's SpeculativeEngine (None before it loads, or for a test's fake)."""
        return getattr(self.worker.engine, "engine", None)

    def warm_token_s(self) -> float | None:
        engine = self._engine() if self.worker.ready.is_set() else None
        costs = getattr(engine, "costs", None)  # none timed: a test's fake
        return costs.warm_token if costs is not None and costs.warm_token > 0 else None

    def warm(self, request: BackendRequest, on_done: Callable[[WarmEnd], None] | None = None) -> bool:
        """A worker warm job: the prompt prefilled, nothing generated."""
        policy = replace(request.request.policy, max_new_tokens=0)
        stream = self.worker.submit(replace(request.request, id=request.id + "-warm", policy=policy),
                                    warm=True)
        task = asyncio.get_running_loop().create_task(self._warm_to_end(stream, on_done))
        self._warms.add(task)  # busy until `on_done` ran (specfill/stats' `idle` waits for it)
        task.add_done_callback(self._warms.discard)
        return True

    @staticmethod
    async def _warm_to_end(stream: AsyncIterator[EngineEvent],
                           on_done: Callable[[WarmEnd], None] | None) -> None:
        try:
            async for event in stream:
                if isinstance(event, Finished) and on_done is not None:
                    on_done(event)
        except Exception:  # a warm is a hint: never an error the user sees
            log.exception("warm failed")

    def precompute(self, request: BackendRequest,
                   on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        """A worker warm job that generates: its tokens land in the engine's lineages."""
        job = replace(request.request, id=request.id + "-next", background=True)
        return self.worker.submit(job, on_final, warm=True)

    def preempt_background(self) -> None:
        self.worker.preempt_warms()

    def status(self) -> BackendStatus:
        worker, engine = self.worker, self._engine()
        return BackendStatus(
            worker.ready.is_set(), worker.load_error, worker.threads_in_use,
            list(worker.abort_latencies_s), list(worker.preempt_latencies_s),
            engine.memory.snapshot() if engine is not None else {},
            engine.history.snapshot() if engine is not None else {},
            engine.costs.to_json() if engine is not None and engine.costs is not None else {})

    def stats(self) -> list[dict]:
        # The engine's own numbers (drafted, accepted, ...) are in the totals of specfill/stats.
        return [{"name": "local", "kind": "local", "url": None,
                 "healthy": self.worker.ready.is_set() and self.worker.load_error is None,
                 "requests": self.requests, "completed": self.completed}]

    def stop(self) -> None:
        self.worker.stop()
