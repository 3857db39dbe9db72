"""The generations in flight, at most one per document, and what each waiting request sees.

A request at the same (version, position) joins the running generation, and so does one
that typed through a remote stream (backends/type_through.py); a request anywhere else
supersedes it. Each follower is streamed its own cleaned view under its own JSON-RPC id and
gets exactly one done:true, whatever the outcome.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from lsp_server.backends.base import Backend
from lsp_server.backends.type_through import ENDED_KEPT, ENDS_BY_ITSELF, typed_through
from lsp_server.completion.documents import Document
from lsp_server.completion.prompts import Cursor, Prepared
from lsp_server.completion.protocol import StreamUpdate
from lsp_server.completion.stats import ServerStats
from lsp_server.context.postprocess import final_text, stream_text
from lsp_server.engine.types import Finished, TextDelta


def clean(text: str, suffix: str, final: bool = False) -> str:
    """What the user sees (context.postprocess): no repetition of the text after the cursor
    or of its own lines, one line mid-line, no trailing blank lines; the final text also
    closes or cuts the brackets it opened."""
    return final_text(text, suffix) if final else stream_text(text, suffix)


@dataclass
class View:
    """How one waiting request sees a generation: at its own cursor, cleaned against its
    own suffix, less the generation's first `typed` characters, which its document already
    holds (a request that typed through a remote stream joins it)."""

    cursor: Cursor
    suffix: str
    typed: str = ""
    shown: str = ""  # the last text streamed to it
    final: str = ""  # its answer, once the generation ended

    def text(self, raw: str, final: bool = False) -> str:
        return clean(raw[len(self.typed):], self.suffix, final) if raw.startswith(self.typed) else ""


@dataclass
class Generation:
    cursor: Cursor
    request_id: str  # the backend's id of its request (BackendRequest.id)
    suffix: str
    doc_text: str = ""  # the document at cursor.version, for requests that type through it
    offset: int = 0  # the cursor's offset in doc_text
    task: asyncio.Task | None = None
    # The requests waiting on it by JSON-RPC id, each streamed to under its own id; an id
    # leaves when its stream has had its done:true.
    followers: dict = field(default_factory=dict)
    raw: str = ""  # its text so far, before the clean-up


def update(msg_id: Any, view: View, text: str, done: bool) -> StreamUpdate:
    cursor = view.cursor
    return StreamUpdate(cursor.uri, cursor.version, {"line": cursor.line, "character": cursor.character},
                        msg_id, text, done)


class Streams:
    def __init__(self, notify: Callable[[StreamUpdate], None], tell_user: Callable[..., None],
                 stats: ServerStats):
        self.notify = notify
        self.tell_user = tell_user
        self.stats = stats
        self.inflight: dict[str, Generation] = {}
        # The last remote generation that ended by itself, per document: typing what it
        # predicted is answered from it (`answer_ended`); the newest few documents only.
        self.ended: OrderedDict[str, Generation] = OrderedDict()

    def running(self, uri: str) -> Generation | None:
        generation = self.inflight.get(uri)
        return generation if generation is not None and not generation.task.done() else None

    def join(self, doc: Document, cursor: Cursor, encoding: str, backend: Backend,
             by_text: bool) -> tuple[Generation | None, View | None]:
        """The running generation and this request's view of it, or (None, None) after
        superseding it. `by_text`: a request may type through it (remote and greedy)."""
        generation = self.inflight.get(cursor.uri)
        view = None
        if generation is not None and not generation.task.done():
            view = (View(cursor, generation.suffix) if generation.cursor == cursor else
                    self._join_typed(generation, doc, cursor, encoding, by_text))
        if view is None and generation is not None:  # superseded: the client moved on
            generation.task.cancel()
            # Stop the model now, not when the loop next runs the cancelled task: the
            # prompt then built is on free cores, not beside a decode holding both (a
            # type-through answer, which needs no model call, waited on that).
            backend.abort(generation.request_id)
        return (generation, view) if view is not None else (None, None)

    def _join_typed(self, generation: Generation, doc: Document, cursor: Cursor, encoding: str,
                    by_text: bool) -> View | None:
        """The document is the generation's plus text it streamed, typed at its cursor, and
        the cursor after it: the rest of that stream is this request's answer too."""
        if not by_text or not generation.doc_text:
            return None
        typed = typed_through(generation.doc_text, generation.offset, generation.raw, doc.text,
                              doc.offset_at(cursor.line, cursor.character, encoding))
        if not typed:
            return None
        self.stats.joined()
        return View(cursor, generation.suffix, typed)

    def answer_ended(self, doc: Document, cursor: Cursor, encoding: str, by_text: bool,
                     msg_id: Any) -> str | None:
        """Type-through on the document's last remote stream that ended by itself: its rest,
        at once. None: not typed through it."""
        ended = self.ended.get(cursor.uri)
        view = self._join_typed(ended, doc, cursor, encoding, by_text) if ended is not None else None
        if view is None:
            return None
        view.final = view.text(ended.raw, final=True)
        self.notify(update(msg_id, view, view.final, done=True))
        return view.final

    def start(self, backend: Backend, prepared: Prepared, doc: Document, cursor: Cursor, encoding: str,
              on_shown: Callable[[Cursor, str], None]) -> tuple[Generation, View]:
        """A new generation for this request, run on `backend`; `on_shown(cursor, text)`
        after it ended with text for the newest request's cursor."""
        generation = Generation(cursor, prepared.request.id, prepared.suffix, doc.text,
                                doc.offset_at(cursor.line, cursor.character, encoding))
        generation.task = asyncio.create_task(self._run(backend, prepared, generation, on_shown))
        self.inflight[cursor.uri] = generation
        generation.task.add_done_callback(lambda _t, g=generation: self._forget(g))
        return generation, View(cursor, prepared.suffix)

    async def follow(self, generation: Generation, msg_id: Any, view: View) -> str | None:
        generation.followers[msg_id] = view
        self._stream_update(generation)  # a joining request gets what is known at once
        try:
            await asyncio.shield(generation.task)
            return view.final if view.final.strip() else None
        except asyncio.CancelledError:
            if generation.followers.pop(msg_id, None) is not None:  # its stream has not ended yet
                self.notify(update(msg_id, view, "", done=True))
            if not generation.followers:
                generation.task.cancel()  # nobody waits for it any more
            raise
        finally:
            if generation.task.done():
                self._forget(generation)

    def _forget(self, generation: Generation) -> None:
        """Only running generations stay in `inflight` (it is bounded by the open documents)."""
        if self.inflight.get(generation.cursor.uri) is generation:
            del self.inflight[generation.cursor.uri]

    async def _run(self, backend: Backend, prepared: Prepared, generation: Generation,
                   on_shown: Callable[[Cursor, str], None]) -> None:
        """Stream the generation to its followers, each as its View sees it; every one of
        them gets exactly one done:true, whatever the outcome."""
        context = prepared.context.kind.value
        self.stats.request(context)
        try:
            final: Finished | None = None
            on_final = lambda event: self.stats.work(context, event.stats)  # noqa: E731
            async for event in backend.submit(prepared.request, on_final):
                if isinstance(event, TextDelta):
                    generation.raw = event.text
                    self._stream_update(generation)
                elif isinstance(event, Finished):
                    final = event
        except asyncio.CancelledError:
            self.stats.outcome(context, "cancelled")
            self._end_streams(generation, None)
            raise
        assert final is not None
        if final.reason in ("unavailable", "error"):
            self._failed(backend, context, generation, final)
            return
        self._ended(backend, prepared, context, generation, final, on_shown)

    def _failed(self, backend: Backend, context: str, generation: Generation, final: Finished) -> None:
        self.stats.outcome(context, "error", final.stats)
        self._end_streams(generation, None)
        # "unavailable": no server could serve, and the router told the user; a failed
        # worker is restarted, and that is what the user hears.
        if final.reason == "error" and not backend.failed:
            self.tell_user(f"specfill: completion failed: {final.error}", key="completion-failed")

    def _ended(self, backend: Backend, prepared: Prepared, context: str, generation: Generation,
               final: Finished, on_shown: Callable[[Cursor, str], None]) -> None:
        text = clean(final.text, prepared.suffix, final=True)
        generation.raw = final.text
        if final.reason in ENDS_BY_ITSELF and not backend.keeps_lineages:
            self.ended[generation.cursor.uri] = generation
            self.ended.move_to_end(generation.cursor.uri)
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)
        self.stats.reused(final.stats)
        first = next(iter(generation.followers), None)
        self.stats.outcome(context, "completion" if text.strip() else "empty", final.stats, first)
        newest = list(generation.followers.values())[-1] if generation.followers else None
        self._end_streams(generation, final.text)
        # The next suggestion is readied for the newest request's cursor: where the user is.
        if newest is not None and newest.final.strip():
            on_shown(newest.cursor, newest.final)

    def _stream_update(self, generation: Generation) -> None:
        for msg_id, view in list(generation.followers.items()):
            text = view.text(generation.raw)
            if text != view.shown and text.strip():
                view.shown = text
                self.notify(update(msg_id, view, text, done=False))

    def _end_streams(self, generation: Generation, final_raw: str | None) -> None:
        """done:true to every request still following: its final text, or "" (no answer)."""
        ended = list(generation.followers.items())
        generation.followers.clear()
        for msg_id, view in ended:
            view.final = view.text(final_raw, final=True) if final_raw is not None else ""
            self.notify(update(msg_id, view, view.final, done=True))
