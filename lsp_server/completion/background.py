"""Work while the user rests: warms (a prompt prefilled, nothing generated) and the next
suggestion precomputed for an accept (completion/precompute.py). All of it runs at the
backend's lowest priority, and a real request stops it at once (`preempt_background`).

Warms go to the local engine's worker or to the remote server a document sticks to. On the
local engine a warm of a cursor's short window is followed by one of the whole window, which
the document's prompts take once it is in (docs/design.md, "The first suggestion in a file").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Callable

from lsp_server.backends.base import Backend, WarmEnd
from lsp_server.completion.documents import Document, DocumentStore, offset_to_position
from lsp_server.completion.precompute import Assumed, Pending, Precomputes, accepts
from lsp_server.completion.prompts import Cursor, Prepared, Prompts, package_head
from lsp_server.completion.stats import ServerStats
from lsp_server.completion.streams import Streams
from lsp_server.config import Config

log = logging.getLogger(__name__)


class Background:
    def __init__(self, documents: DocumentStore, backend_ref: Callable[[], Backend | None],
                 config_ref: Callable[[], Config], stats: ServerStats, prompts: Prompts,
                 streams: Streams):
        self.documents = documents
        self.backend_ref = backend_ref
        self.config_ref = config_ref
        self.stats = stats
        self.prompts = prompts
        self.streams = streams
        self._warms: set[asyncio.Task] = set()
        self.precomputes = Precomputes(on_waste=stats.wasted)

    # -- warms ------------------------------------------------------------------------

    def warm(self, cursor: Cursor, encoding: str, doc: Document | None = None,
             head_only: bool = False, grow: bool = False) -> None:
        """Prefill the prompt for `cursor` in the background (lowest priority; any request
        preempts it). `doc`: a detached document to warm instead of the stored one.
        `head_only`: only the package head of the files open now (`Prompts.package_head`).
        `grow`: the cursor's prompt with the whole window; once it is in, the document's
        prompts take that window (a warm of the short one asks for it when done)."""
        config, backend = self.config_ref(), self.backend_ref()
        if not (config.enabled and config.warm) or backend is None:
            return
        task = asyncio.create_task(self._warm_logged(backend, cursor, encoding, doc, head_only, grow))
        self._warms.add(task)
        task.add_done_callback(self._warms.discard)

    def warming(self) -> bool:
        """A warm not yet handed to the backend: its prompt may still be on its way there,
        and the backend then does not count it busy yet (specfill/stats' `idle` waits for both)."""
        return any(not task.done() for task in self._warms)

    def warm_opened(self, uri: str, encoding: str) -> None:
        """didOpen: no cursor yet. With the package head as other files' context, that head
        as the file opened next will start with it (the file just opened is among its
        files); else the end of the file (its whole tail is the prefix)."""
        doc = self.documents.get(uri)
        if doc is None:
            return
        if package_head(self.config_ref()):  # the cursor only picks the warm's policy: the top
            self.warm(Cursor(uri, doc.version, 0, 0), encoding, head_only=True)
        else:
            line, character = offset_to_position(doc.text, len(doc.text), encoding)
            self.warm(Cursor(uri, doc.version, line, character), encoding)

    async def _warm_logged(self, *args: Any) -> None:
        try:
            await self._warm(*args)
        except Exception:  # a warm is a hint: never an error the user sees
            log.exception("warm failed")

    async def _warm(self, backend: Backend, cursor: Cursor, encoding: str,
                    detached: Document | None, head_only: bool = False, grow: bool = False) -> None:
        config = self.config_ref()
        if not await backend.wait_ready(config.readyTimeoutS):
            return
        doc = detached or self.documents.get(cursor.uri)
        if doc is None or doc.problem or self.streams.running(cursor.uri) is not None:
            return  # closed, out of sync, or a real request is prefilling this document anyway
        cursor = replace(cursor, version=doc.version)
        codec = backend.codec()
        if not backend.keeps_lineages:  # a remote server: the very prompt a request here would send
            request = self.prompts.prepare(doc, cursor, encoding, config, codec).request
            backend.warm(request, lambda end: self.stats.warm(end.reason, end.stats))
            return
        prepared = self.prompts.prepare(doc, cursor, encoding, config, codec, grow)
        if grow and prepared.window_line in (None, self.prompts.window_start(doc.uri)):
            return  # the window is already whole
        # The whole window cuts no cached prompt: with other files' head in front it shares
        # that head with the cursor's short window, which the requests take until it is in.
        request = replace(prepared.request, request=replace(prepared.request.request, keep_cached=grow))
        head = self.prompts.package_head(doc, config, codec) if head_only else []
        if head:
            request = replace(request, request=replace(request.request, prompt_ids=tuple(head), heal=""))
        once = detached is not None or head_only  # not a cursor's prompt the document keeps
        backend.warm(request, lambda end: self._warmed(end, cursor, encoding, doc, config, prepared,
                                                       once, grow))

    def _warmed(self, end: WarmEnd, cursor: Cursor, encoding: str, doc: Document, config: Config,
                prepared: Prepared, once: bool, grow: bool) -> None:
        """A local warm ended (the backend is busy until this ran): counted; after the
        cursor's short window, the whole one while the user rests; after that, the document's."""
        self.stats.warm(end.reason, end.stats)
        if end.reason != "warm" or once:
            return
        if not grow:
            self.warm(cursor, encoding, grow=True)
        elif self.documents.get(cursor.uri) is doc and doc.version == cursor.version:
            self.prompts.grown(doc.uri, prepared, config)

    # -- the next suggestion, ready on accept (completion/precompute.py) --------------

    def after_shown(self, cursor: Cursor, encoding: str, text: str) -> None:
        """A completion was shown: precompute the next one for each accept it allows, or,
        where the backend keeps no lineages to find them in, warm the accepted prompt."""
        config, backend = self.config_ref(), self.backend_ref()
        if not (config.precompute and config.warm and config.temperature <= 0
                and backend is not None and backend.keeps_lineages):
            self._warm_after(cursor, encoding, text)
            return
        doc = self.documents.get(cursor.uri)
        if doc is None or doc.version != cursor.version:
            return
        offset = doc.offset_at(cursor.line, cursor.character, encoding)
        chain = []
        for accepted in accepts(text):
            head = doc.text[:offset] + accepted
            line, character = offset_to_position(head, len(head), encoding)
            state = Assumed(cursor.uri, head + doc.text[offset:], line, character)
            chain.append(Pending(state, accepted, doc.text[:offset], doc.text[offset:]))
        self.precomputes.start(cursor.uri, chain,
                               lambda item: self._precompute(item, doc, offset, encoding))

    async def _precompute(self, item: Pending, doc: Document, offset: int, encoding: str) -> None:
        """One background generation for the state `item` assumes; its tokens land in the
        engine's lineage, where a request at exactly that state finds them."""
        backend = self.backend_ref()
        state = item.state
        if backend is None or not backend.keeps_lineages or self.documents.get(state.uri) is not doc \
                or doc.text[:offset] + item.inserted + doc.text[offset:] != state.text:
            return  # the document (or the backend) moved on: the guess is void
        accepted = self.documents.detached(doc, offset, item.inserted)
        cursor = Cursor(state.uri, doc.version, state.line, state.character)
        prepared = self.prompts.prepare(accepted, cursor, encoding, self.config_ref(), backend.codec())
        # Called even when the chain is cancelled before the end (then a preempted job).
        on_final = lambda event: self.precomputes.finished(  # noqa: E731
            item, self.stats.background(event.stats))
        try:
            async for _event in backend.precompute(prepared.request, on_final):
                pass
        except Exception:  # a precompute is a guess: never an error the user sees
            log.exception("precompute failed")

    def settle(self, doc: Document, cursor: Cursor, encoding: str) -> None:
        """A real request: stop the background chain, and count the guesses it disproves."""
        self.precomputes.cancel(cursor.uri)
        state = Assumed(cursor.uri, doc.text, cursor.line, cursor.character)
        offset = doc.offset_at(cursor.line, cursor.character, encoding)
        self.stats.missed(self.precomputes.settle(cursor.uri, state, doc.text[:offset],
                                                  doc.text[offset:]))

    def _warm_after(self, cursor: Cursor, encoding: str, text: str) -> None:
        """After a completion: warm the prompt the user gets by accepting it."""
        doc = self.documents.get(cursor.uri)
        if doc is None or doc.version != cursor.version:
            return
        offset = doc.offset_at(cursor.line, cursor.character, encoding)
        accepted = self.documents.detached(doc, offset, text)
        line, character = offset_to_position(accepted.text, offset + len(text), encoding)
        self.warm(Cursor(cursor.uri, doc.version, line, character), encoding, accepted)
