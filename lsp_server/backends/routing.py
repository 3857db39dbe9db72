"""Several remote backends behind the one interface: a document sticks to one server (its
prefix stays in that server's KV cache), a failed server is skipped until its health check
passes again, and with `fallback: local` the local engine serves while all are down.

Affinity is rendezvous hashing (highest score of hash(key, url) wins): consistent, so when a
server goes away only its own documents move, and they move back when it returns. A request
that fails before it finished is retried on the next server in the document's order; the
text streamed so far is replaced (events carry the full text), so every request still gets
exactly one answer. Messages: one popup when every server is down (and when a server refuses
the request for a reason the user must fix), log lines for the rest. Warms (backends.warming)
go to the server the document sticks to, count in its health, and never pop a message.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import replace
from typing import AsyncIterator, Callable

from lsp_server.backends.base import Backend, BackendRequest, BackendStatus, PromptCodec
from lsp_server.backends.prompt_text import TextCodec
from lsp_server.backends.remote import RemoteBackend
from lsp_server.backends.warming import REFUSALS, WARM_STEP_TOKENS, WarmOutcome, add_step, steps_to_send
from lsp_server.backends.wire import RemoteError
from lsp_server.engine.types import EngineEvent, Finished, Stats

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 1.0
LOCAL_READY_TIMEOUT_S = 120.0
USER_FIXES = ("auth", "tls", "http_4xx")  # errors only a settings change fixes: told at once  # how long a request in an outage waits for the local models
# Finished.reason when no backend could serve: the router has told the user already.
UNAVAILABLE = "unavailable"


def session_key(affinity: str) -> str:
    """What routers see: a stable hash of the document, not its path."""
    return hashlib.sha256(affinity.encode("utf-8")).hexdigest()[:32]


def affinity_order(affinity: str, backends: list[RemoteBackend]) -> list[RemoteBackend]:
    def score(backend: RemoteBackend) -> bytes:
        return hashlib.sha256(f"{affinity}\x00{backend.url}".encode("utf-8")).digest()
    return sorted(backends, key=score, reverse=True)


class Router:
    keeps_lineages = False  # servers tokenize text: the service types through their streams

    def __init__(self, remotes: list[RemoteBackend], tell_user: Callable[[str], None],
                 fallback: Backend | None = None, problem: str | None = None):
        self.remotes = remotes
        self.fallback = fallback
        self.tell_user = tell_user
        self.load_error = problem
        self._pumps: dict[str, asyncio.Task] = {}
        self._told: set[str] = set()  # messages shown in the current outage / until success
        self._all_down_told = False
        self._health_task: asyncio.Task | None = None
        self.failovers = 0
        self.fallbacks = 0
        self._primes: list[asyncio.Task] = []
        self.warm_step_tokens = WARM_STEP_TOKENS
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside an event loop (tests): the first request connects
            loop = None
        if loop is not None:
            self._primes = [loop.create_task(r.prime()) for r in remotes]

    # -- the interface --------------------------------------------------------------

    async def wait_ready(self, timeout_s: float) -> bool:
        return self.load_error is None

    def codec(self) -> PromptCodec:
        return TextCodec().as_prompt_codec()

    @property
    def failed(self) -> str | None:
        return None  # a server that fails is routed around; the fallback worker answers for itself

    def submit(self, request: BackendRequest,
               on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        queue: asyncio.Queue = asyncio.Queue()
        pump = asyncio.create_task(self._serve(request, queue))
        self._pumps[request.id] = pump
        return self._stream(request.id, pump, queue, on_final)

    def abort(self, request_id: str) -> None:
        pump = self._pumps.get(request_id)
        if pump is not None:
            pump.cancel()

    def is_idle(self) -> bool:
        local_idle = self.fallback.is_idle() if self.fallback is not None else True
        warming = any(r.warming.busy() for r in self.remotes)
        return not self._pumps and not warming and local_idle

    def warm_token_s(self) -> float | None:
        return None  # the servers' prefill is theirs to pace (a first window of fixed size)

    def preempt_background(self) -> None:
        """Nothing to stop here: a warm step is not sent while a real request runs on its
        server, and a request cancels the warm under way there as it starts."""

    async def precompute(self, request: BackendRequest,
                         on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        """No lineages to keep a precompute in: nothing runs."""
        return
        yield  # an async generator that ends at once

    def status(self) -> BackendStatus:
        """Ready once the settings are usable (servers are not waited for: a request that
        finds none up answers at once); the local fallback's engine figures beside it."""
        local = self.fallback.status() if self.fallback is not None else None
        ready = self.load_error is None
        return replace(local, ready=ready, load_error=self.load_error) if local is not None \
            else BackendStatus(ready, self.load_error)

    def stats(self) -> list[dict]:
        lines = [r.meter.to_json(r.healthy, "on" if r.warming.enabled else
                                 f"off: {r.warming.off_reason}") for r in self.remotes]
        if self.fallback is not None:
            lines += self.fallback.stats()
        return lines

    def stop(self) -> None:
        for task in [*self._primes, *self._pumps.values()]:
            task.cancel()
        for remote in self.remotes:
            remote.warming.cancel()
        if self._health_task is not None:
            self._health_task.cancel()
        if self.fallback is not None:
            self.fallback.stop()

    # -- warming --------------------------------------------------------------------

    def warm(self, request: BackendRequest,
             on_done: Callable[[WarmOutcome], None] | None = None) -> bool:
        """Load `request`'s prompt into the cache of the server its document sticks to, in
        the background; a newer warm on that server replaces this one. False: not sent (no
        healthy server, or that server does not take warms)."""
        home = next((b for b in affinity_order(request.affinity, self.remotes) if b.healthy), None)
        if home is None or not home.warming.enabled or not request.prompt_text:
            return False
        if home.dialect.warm_body("", "", "") is None:
            return False
        home.warming.cancel()
        task = asyncio.get_running_loop().create_task(self._warm(home, request, on_done))
        home.warming.task = task
        return True

    async def _warm(self, backend: RemoteBackend, request: BackendRequest,
                    on_done: Callable[[WarmOutcome], None] | None) -> None:
        text = backend.text_for(request)
        session = session_key(request.affinity)
        outcome = WarmOutcome("warm")
        try:
            cuts = steps_to_send(text, backend.cached_text, self.warm_step_tokens)
            if not cuts:
                outcome.reason = "cached"
            for cut in cuts:
                if backend.active:  # a real request runs there: its prompt fills the cache
                    outcome.reason = "aborted"
                    break
                add_step(outcome, await backend.warm_step(text[:cut], session))
        except asyncio.CancelledError:
            outcome.reason = "aborted"
            raise
        except RemoteError as exc:
            outcome.reason = "error"
            if exc.kind in REFUSALS:
                backend.warming.turn_off(backend.url, exc)
            else:  # down: counted in its health (warm_step), told by the next real request
                log.info("specfill: a cache warm-up to %s failed: %s", backend.url, exc)
            if not backend.healthy:
                self._ensure_health_checks()
        finally:
            backend.meter.add_warm(outcome)
            if on_done is not None:
                on_done(outcome)

    # -- one request ----------------------------------------------------------------

    async def _stream(self, request_id: str, pump: asyncio.Task, queue: asyncio.Queue,
                      on_final: Callable[[Finished], None] | None) -> AsyncIterator[EngineEvent]:
        try:
            while True:
                event = await queue.get()
                if isinstance(event, Finished) and on_final is not None:
                    on_final(event)
                yield event
                if isinstance(event, Finished):
                    return
        finally:
            pump.cancel()  # the consumer went away: close the HTTP stream now
            self._pumps.pop(request_id, None)

    async def _serve(self, request: BackendRequest, queue: asyncio.Queue) -> None:
        try:
            await self._route(request, queue.put_nowait)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must still end the request with one answer
            log.exception("remote request %s failed", request.id)
            queue.put_nowait(Finished(request.id, "", (), Stats(stop_reason="error"), "error",
                                      error=f"{type(exc).__name__}: {exc}"))

    async def _route(self, request: BackendRequest, emit: Callable[[EngineEvent], None]) -> None:
        session = session_key(request.affinity)
        order = affinity_order(request.affinity, self.remotes)
        tried = 0
        for backend in [b for b in order if b.healthy]:
            tried += 1
            try:
                try:
                    async for event in backend.generate(request, session):
                        emit(event)
                except RemoteError as exc:
                    if not self._refused_layout(backend, request, exc):
                        raise
                    async for event in backend.generate(request, session):  # the file alone
                        emit(event)
                self._recovered(backend)
                return
            except RemoteError as exc:
                self._failed(backend, exc)
                if not exc.retry:
                    emit(_unavailable(request))
                    return
                self.failovers += 1
        self._ensure_health_checks()
        if self.fallback is not None and request.rebuild is not None:
            self._outage("the local engine serves until one is back")
            self.fallbacks += 1
            if not await self.fallback.wait_ready(LOCAL_READY_TIMEOUT_S):
                emit(_unavailable(request))
                return
            local = request.rebuild(self.fallback.codec())
            async for event in self.fallback.submit(local):
                emit(event)
            return
        self._outage("no completions until one is back")
        emit(_unavailable(request))

    # -- health and messages ----------------------------------------------------------

    def _refused_layout(self, backend: RemoteBackend, request: BackendRequest,
                        exc: RemoteError) -> bool:
        """A 4xx to a prompt carrying other files (too long for the server's context, a
        server that will not take the control tokens): from now on that server gets the
        file alone, said once in the log."""
        if exc.kind != "http_4xx" or not request.plain_text or not backend.repo_layout:
            return False
        backend.repo_layout = False
        log.warning("specfill: %s refused a prompt with other files' context (%s); it gets "
                    "the current file alone from now on", backend.url, exc)
        return True

    def _failed(self, backend: RemoteBackend, error: RemoteError) -> None:
        log.warning("specfill: %s", error)
        if error.kind in USER_FIXES:
            self._tell_once(f"{backend.url}:{error.kind}", f"specfill: {error}")
        if not backend.healthy:
            self._ensure_health_checks()

    def _recovered(self, backend: RemoteBackend) -> None:
        self._told = {key for key in self._told if not key.startswith(f"{backend.url}:")}
        if self._all_down_told:
            self._all_down_told = False
            log.warning("specfill: %s is back; remote completions resume", backend.url)

    def _outage(self, what_now: str) -> None:
        if self._all_down_told:
            return
        self._all_down_told = True
        errors = [r.last_error for r in self.remotes if r.last_error]
        if errors and all(e.kind in USER_FIXES for e in errors):
            return  # each was told already, with what to fix
        reasons = "; ".join(str(e) for e in errors) or "none configured"
        self.tell_user(f"specfill: no remote backend is reachable ({reasons}); {what_now}.")

    def _tell_once(self, key: str, message: str) -> None:
        if key not in self._told:
            self._told.add(key)
            self.tell_user(message)

    def _ensure_health_checks(self) -> None:
        if self._health_task is None or self._health_task.done():
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def _health_loop(self) -> None:
        """Probe the servers that are down until all are up again."""
        while any(not r.healthy for r in self.remotes):
            await asyncio.sleep(HEALTH_INTERVAL_S)
            for backend in [r for r in self.remotes if not r.healthy]:
                if await backend.check_health():
                    backend.healthy = True
                    log.warning("specfill: %s passes its health check again", backend.url)
                    if self._all_down_told:
                        self._all_down_told = False


def _unavailable(request: BackendRequest) -> Finished:
    return Finished(request.id, "", (), Stats(stop_reason=UNAVAILABLE), UNAVAILABLE)


