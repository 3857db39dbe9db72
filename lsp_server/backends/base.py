"""The one interface the completion service talks to, and the request it hands over."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Protocol

from lsp_server.engine.types import CompletionRequest, EngineEvent, Finished, Stats


@dataclass(frozen=True)
class BackendRequest:
    """One generation. `request` carries the token ids (local engine) and the policy; remote
    backends send `prompt_text` (the same FIM prompt rendered as text, FIM tokens as their
    text) and `stop` strings, and route on `affinity` (the document)."""

    request: CompletionRequest
    prompt_text: str = ""
    stop: tuple[str, ...] = ()
    affinity: str = ""
    # `prompt_text` without other files' chunks ("" when it has none): what a server that
    # rejects the repository-level prompt is sent instead.
    plain_text: str = ""
    # Whitespace cut from the end of `prompt_text` that the server's output must start with;
    # the output is shown without it (backends.remote, completion.prompts.prepare).
    heal: str = ""
    # The same completion prepared for another backend's codec (the local fallback wants
    # token ids where a remote took text).
    rebuild: Callable[["PromptCodec"], "BackendRequest"] | None = field(
        default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.request.id


@dataclass(frozen=True)
class PromptCodec:
    """How a backend wants its prompt: `encode` for the token budget, the FIM ids to put in,
    and `render(ids) -> text` where the backend takes text (None: it takes the ids)."""

    encode: Callable[[str], list[int]]
    fim: Any  # lsp_server.context.prompt.FimTokens
    render: Callable[[list[int]], str] | None = None
    repo: Any = None  # the repository-level layout's marker ids (local_runtime.repo_tokens), if any


class WarmEnd(Protocol):
    """How a warm ended (an engine's `Finished`, a server's `warming.WarmOutcome`)."""

    reason: str  # warm: its prompt is in the cache; cached: it was already; aborted; error

    @property
    def stats(self) -> Stats: ...


@dataclass(frozen=True)
class BackendStatus:
    """The `engine` part of specfill/stats, and the local engine's memories beside it."""

    ready: bool
    load_error: str | None
    threads: int | None = None  # the local engine's torch threads
    abort_latencies_s: list[float] = field(default_factory=list)
    preempt_latencies_s: list[float] = field(default_factory=list)
    acceptance_memory: dict = field(default_factory=dict)  # engine/controller.py
    draft_pool: dict = field(default_factory=dict)  # earlier prompts and outputs it drafts from
    round_costs: dict = field(default_factory=dict)  # engine/costs.py, as the live rounds set them


class Backend(Protocol):
    """What `CompletionService` needs. A consumer that stops iterating `submit()`'s stream
    (cancelled, superseded) aborts the generation; `abort(id)` does the same from outside.
    Background work (`warm`, `precompute`) runs at the lowest priority: a real request
    preempts it, and `preempt_background()` stops it at once."""

    load_error: str | None
    failed: str | None  # why the generation side failed for good (the server restarts it)
    # True: the backend keeps its greedy generations by prompt ids and answers a prompt that
    # extends one from it, token-exactly (the local engine: engine/lineage.py), and keeps
    # prompts cached by token prefix. Then type-through is its own, a next suggestion
    # precomputed in the background is found by the request at that state, and a warm's
    # short window is grown to the whole one while the user rests. False (remote servers:
    # they tokenize text): the service types through a streamed text itself, and a warm
    # sends the prompt a request would.
    keeps_lineages: bool

    async def wait_ready(self, timeout_s: float) -> bool: ...

    def codec(self) -> PromptCodec: ...

    def submit(self, request: BackendRequest,
               on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        """`on_final` gets the request's Finished event (its stats), cancelled ones too where
        the backend produces one: the server counts every request's work."""
        ...

    def abort(self, request_id: str) -> None: ...

    def is_idle(self) -> bool: ...

    def warm_token_s(self) -> float | None:
        """Seconds a prompt token of a warm costs here, as timed (None: not known)."""
        ...

    def warm(self, request: BackendRequest,
             on_done: Callable[[WarmEnd], None] | None = None) -> bool:
        """Load `request`'s prompt into the cache in the background, generating nothing;
        `on_done` when it ended. False: not sent (no server for it, or warms are off)."""
        ...

    def precompute(self, request: BackendRequest,
                   on_final: Callable[[Finished], None] | None = None) -> AsyncIterator[EngineEvent]:
        """Generate `request` in the background, kept where a request at its prompt finds it
        (`keeps_lineages`; a backend without lineages ends the stream at once)."""
        ...

    def preempt_background(self) -> None:
        """A real request has arrived: background work stops now, before its prompt is built."""
        ...

    def status(self) -> BackendStatus: ...

    def stats(self) -> list[dict]: ...

    def stop(self) -> None: ...
