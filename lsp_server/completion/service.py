"""One inline completion, from cursor to cleaned text: what the server's handler calls.

`CompletionService.complete` checks that the document and the backend can serve, then joins
the running generation (completion/streams.py) or supersedes it and starts one on the
prompt prepared for the cursor (completion/prompts.py); after a completion is shown, the
next one is readied in the background (completion/background.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from lsp_server.backends.base import Backend, PromptCodec
from lsp_server.completion.background import Background
from lsp_server.completion.documents import Document, DocumentStore
from lsp_server.completion.precompute import Precomputes
from lsp_server.completion.prompts import Cursor, Prepared, Prompts
from lsp_server.completion.stats import ServerStats
from lsp_server.completion.streams import Generation, Streams
from lsp_server.config import Config

log = logging.getLogger(__name__)


class CompletionService:
    def __init__(
        self, documents: DocumentStore, backend_ref: Callable[[], Backend | None],
        config_ref: Callable[[], Config], notify: Callable[[Any], None],
        tell_user: Callable[..., None], stats: ServerStats,
    ):
        self.documents = documents
        self.backend_ref = backend_ref
        self.config_ref = config_ref
        self.tell_user = tell_user
        self.prompts = Prompts(documents, backend_ref)
        self.streams = Streams(notify, tell_user, stats)
        self.background = Background(documents, backend_ref, config_ref, stats, self.prompts,
                                     self.streams)

    @property
    def roots(self) -> list[str]:
        """The workspace folders (POSIX paths), set by the server at initialize."""
        return self.prompts.roots

    @roots.setter
    def roots(self, roots: list[str]) -> None:
        self.prompts.roots = roots

    @property
    def inflight(self) -> dict[str, Generation]:
        return self.streams.inflight

    @property
    def precomputes(self) -> Precomputes:
        return self.background.precomputes

    def _prepare(self, doc: Document, cursor: Cursor, encoding: str, config: Config,
                 codec: PromptCodec, grow: bool = False) -> Prepared:
        """The prompt a request at `cursor` would send now (the tests read it)."""
        return self.prompts.prepare(doc, cursor, encoding, config, codec, grow)

    def warm(self, cursor: Cursor, encoding: str) -> None:
        """The client says the cursor rests there (specfill/warm): prefill its prompt."""
        self.background.warm(cursor, encoding)

    def warm_opened(self, uri: str, encoding: str) -> None:
        self.background.warm_opened(uri, encoding)

    def first_window_tokens(self) -> int:
        """The first window's size a file opened now gets (specfill/stats)."""
        return self.prompts.first_tokens(self.config_ref())

    def warming(self) -> bool:
        return self.background.warming()

    def forget(self, uri: str) -> None:
        """A closed document: its background work and what its prompts were laid out by go."""
        self.precomputes.cancel(uri)
        self.precomputes.discard(uri)
        self.prompts.forget(uri)

    async def complete(self, cursor: Cursor, encoding: str, msg_id: Any) -> str | None:
        """The cleaned completion text, or None when there is nothing to offer."""
        config, backend = self.config_ref(), self.backend_ref()
        if backend is not None:  # any real request stops background work, at once
            backend.preempt_background()
        doc = self.documents.get(cursor.uri)
        if not config.enabled or backend is None or not await self._can_serve(doc, cursor, config, backend):
            return None
        cursor = replace(cursor, version=doc.version)
        self.background.settle(doc, cursor, encoding)
        by_text = not backend.keeps_lineages and config.temperature <= 0  # remote type-through
        generation, view = self.streams.join(doc, cursor, encoding, backend, by_text)
        if view is None:
            answer = self.streams.answer_ended(doc, cursor, encoding, by_text, msg_id)
            if answer is not None:
                if answer.strip():
                    self.background.after_shown(cursor, encoding, answer)
                return answer or None
            prepared = self.prompts.prepare(doc, cursor, encoding, config, backend.codec())
            generation, view = self.streams.start(
                backend, prepared, doc, cursor, encoding,
                lambda at, text: self.background.after_shown(at, encoding, text))
        return await self.streams.follow(generation, msg_id, view)

    async def _can_serve(self, doc: Document | None, cursor: Cursor, config: Config,
                         backend: Backend) -> bool:
        """The document is open and in sync, and the backend ready; else the user is told
        why, once a minute at most."""
        if doc is None:
            self.tell_user(f"specfill: {cursor.uri} is not open on the server; reopen the file.",
                           key="not-open")
            return False
        if doc.problem:  # out of sync or too large: said once when it happened
            log.debug("no completion for %s: %s", cursor.uri, doc.problem)
            return False
        if not await backend.wait_ready(config.readyTimeoutS):
            why = backend.load_error or f"models still loading after {config.readyTimeoutS:.0f} s"
            self.tell_user(f"specfill: no completion ({why}). "
                           + ("Check the model settings or run `specfill doctor`."
                              if backend.load_error else "Try again in a moment."), key="not-ready")
            return False
        return True
