"""One inline completion, from cursor to cleaned text, and the generations in flight.

The server's handler only calls `CompletionService.complete`. Here: build the request
(syntax context -> policy, FIM prompt), run it on the backend (the local engine or a
remote server: `lsp_server.backends`), stream cleaned text to the client, and keep at most
one generation per document: a request at the same
(version, position) joins the running one, a request anywhere else supersedes it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from lsp_server.backends.base import Backend, BackendRequest, PromptCodec
from lsp_server.config import Config
from lsp_server.context.cross_file import CrossFileContext, package_head_ids, uri_path
from lsp_server.context.postprocess import final_text, stream_text
from lsp_server.context.prompt import ContextBudget, build_fim_prompt, first_window_tokens
from lsp_server.context.snippets import SourceFile
from lsp_server.context.workspace_files import WorkspaceFiles
from lsp_server.engine.stopping import stop_strings
from lsp_server.engine.types import CompletionRequest, Finished, Stats, TextDelta
from lsp_server.server.documents import Document, DocumentStore, offset_to_position
from lsp_server.server.precompute import Assumed, Pending, Precomputes, accepts
from lsp_server.server.protocol import StreamUpdate
from lsp_server.server.stats import ServerStats
from lsp_server.syntax.context import classify
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.policy import PolicyOverrides, describe, policy_for
from lsp_server.syntax.types import SyntaxContext

log = logging.getLogger(__name__)
# Documents whose last ended remote generation is kept for type-through.
ENDED_KEPT = 16
_ids = itertools.count(1)


@dataclass(frozen=True)
class Cursor:
    uri: str
    version: int
    line: int
    character: int


@dataclass(frozen=True)
class Prepared:
    request: BackendRequest
    context: SyntaxContext
    suffix: str  # the document after the cursor: what a completion must not repeat
    window_line: int | None = None  # where the prefix window starts (prompt.FimPrompt)
    window_tokens: int = 0  # and the tokens it holds


@dataclass
class View:
    """How one waiting request sees a generation: at its own cursor, cleaned against its
    own suffix, less the generation's first `typed` characters, which its document already
    holds (a request that typed through a remote stream joins it: `_join_typed`)."""

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


def clean(text: str, suffix: str, final: bool = False) -> str:
    """What the user sees (context.postprocess): no repetition of the text after the cursor
    or of its own lines, one line mid-line, no trailing blank lines; the final text also
    closes or cuts the brackets it opened."""
    return final_text(text, suffix) if final else stream_text(text, suffix)


@functools.lru_cache(maxsize=None)
def parse_function(language_id: str) -> Callable[[bytes], Any] | None:
    """tree-sitter's parse for a language (None without a grammar), for files read from disk."""
    parser = make_parser(language_id)
    return parser.parse if parser is not None else None


def source_file(doc: Document) -> SourceFile:
    return SourceFile(uri_path(doc.uri), doc.text, doc.tree, doc.language_id)


def package_head(config: Config) -> bool:
    """Whether other files' context is the package head (the same for every file opened next)."""
    window = config.contextWindow
    return window.extraSources == "package" and window.extraTokens > 0


def prepare(doc: Document, cursor: Cursor, encoding: str, config: Config, codec: PromptCodec,
            head: Callable[[str, str], tuple[int, ...]] = lambda prefix, suffix: (),
            anchor: tuple[int, int] | None = None) -> Prepared:
    """`head(prefix, suffix)`: token ids in front of the FIM prompt (other files' chunks);
    `anchor`: where the document's previous prompt started its window and the tokens it
    held (prompt.py's `anchor_line`, `anchor_tokens`)."""
    prefix, suffix = doc.prefix_suffix(cursor.line, cursor.character, encoding)
    offset = doc.cursor_byte_offset(cursor.line, cursor.character, encoding)
    context = classify(doc.tree, doc.source, offset, doc.language_id)
    spec = config.speculation
    overrides = PolicyOverrides(
        mode=spec.mode, k=spec.k or None, k_max=spec.kMax or None,
        max_new_tokens=config.maxNewTokens or None)
    policy = replace(policy_for(context, overrides), prompt_lookup=spec.promptLookup)
    window = config.contextWindow
    budget = ContextBudget(window.prefixTokens, window.suffixTokens,
                           first_prefix_tokens=window.firstPrefixTokens)
    request_id = f"{cursor.uri}#{next(_ids)}"
    windows: list[tuple[int | None, int]] = []

    def build(codec: PromptCodec) -> BackendRequest:
        prompt = build_fim_prompt(prefix, suffix, codec.encode, codec.fim, budget, window.fimMode,
                                  *(anchor or (None, None)))
        windows.append((prompt.window_line, prompt.prefix_tokens))
        others = head(prefix, suffix)
        ids = (*others, *prompt.ids)
        text = plain = cut = ""
        if codec.render is not None:
            # A server that takes text cannot be made to spell out a healed token. Healed
            # whitespace (the cursor line's indentation, a space after `return`) stays cut
            # and the server's output must start with it: written back, it ends the prompt
            # in a whitespace token no word follows in training, and the server answered
            # nothing at 8 of 12 block spots (a probe, llama-server, the quality spots); cut,
            # at none. Other healed text (a word's start) goes back into the prompt.
            # `plain`: the same prompt without other files, for a server that refuses the
            # repository-level one.
            cut = prompt.heal if not prompt.heal.strip() else ""
            back = "" if cut else prompt.heal
            text = codec.render(list(ids)) + back
            plain = codec.render(list(prompt.ids)) + back if others else ""
        request = CompletionRequest(
            request_id, () if codec.render else ids, policy, config.temperature,
            config.topP, heal="" if codec.render else prompt.heal)
        return BackendRequest(request, text, stop_strings(policy), cursor.uri, rebuild=build,
                              plain_text=plain, heal=cut)

    request = build(codec)
    # The user's code stays out of the log unless they asked for debug.
    log.info("completion %s at %d:%d: %s, %d prompt tokens%s", request_id, cursor.line,
             cursor.character, describe(context, log.isEnabledFor(logging.DEBUG)),
             len(request.request.prompt_ids) or len(request.prompt_text),
             " (characters)" if request.prompt_text else "")
    return Prepared(request, context, suffix, *windows[0])


class CompletionService:
    def __init__(
        self, documents: DocumentStore, backend_ref: Callable[[], Backend | None],
        config_ref: Callable[[], Config], notify: Callable[[str, Any], None],
        tell_user: Callable[..., None], stats: ServerStats,
    ):
        self.documents = documents
        self.backend_ref = backend_ref
        self.config_ref = config_ref
        self.notify = notify
        self.tell_user = tell_user
        self.stats = stats
        self.inflight: dict[str, Generation] = {}
        self.cross_file = CrossFileContext()
        # Per document, the line its last prompt's window started at, the tokens that window
        # held (context/prompt.py) and the first window's size it was started with (kept
        # while the window is: a size from a drifting prefill rate would move its start).
        self.windows: dict[str, tuple[int, int, int]] = {}
        self.roots: list[str] = []  # workspace folders (POSIX paths), set by the server
        self.workspace_files = WorkspaceFiles(parse_function)
        self._warms: set[asyncio.Task] = set()
        # The last remote generation that ended complete, per document: typing what it
        # predicted is answered from it (`_join_typed`); the newest few documents only.
        self.ended: OrderedDict[str, Generation] = OrderedDict()
        self.precomputes = Precomputes(on_waste=stats.wasted)

    def _prepare(self, doc: Document, cursor: Cursor, encoding: str, config: Config,
                 codec: PromptCodec, grow: bool = False) -> Prepared:
        """`grow`: the prompt with the whole window (prefixTokens) a fresh start would take,
        for a warm to fill in while the user rests; the document keeps its window start."""
        def head(prefix: str, suffix: str) -> tuple[int, ...]:
            current = source_file(doc)
            others = self._other_files(doc, config)
            if config.contextWindow.workspaceFiles and config.contextWindow.extraTokens > 0:
                others += self.workspace_files.for_document(
                    current, self.roots, [o.path for o in others])
            plan = self.cross_file.prefix_ids(
                doc.uri, current, cursor.line, prefix, suffix, others, self.roots,
                config.contextWindow.extraTokens, codec.encode, codec.repo,
                config.contextWindow.extraSources)
            return plan.ids

        window = config.contextWindow
        kept = self.windows.get(doc.uri)
        first = kept[2] if kept is not None else first_window_tokens(
            window.firstPrefixTokens, window.firstWindowS, self._warm_token_s(), window.suffixTokens)
        sized = replace(window, firstPrefixTokens=window.prefixTokens if grow else first)
        prepared = prepare(doc, cursor, encoding, replace(config, contextWindow=sized), codec, head,
                           kept[:2] if kept is not None else None)
        if grow:
            return prepared
        if prepared.window_line is None:
            self.windows.pop(doc.uri, None)
        else:
            self.windows[doc.uri] = (prepared.window_line, prepared.window_tokens, first)
        return prepared

    def _warm_token_s(self) -> float | None:
        backend = self.backend_ref()
        return backend.warm_token_s() if backend is not None else None

    def forget(self, uri: str) -> None:
        """A closed document: what its prompts were laid out by is dropped with it."""
        self.cross_file.forget(uri)
        self.windows.pop(uri, None)

    # -- warming: the local engine's worker, or the remote server a document sticks to ---

    def _local_worker(self) -> Any:
        backend = self.backend_ref()
        return getattr(backend, "worker", None) if backend is not None else None

    def warm(self, cursor: Cursor, encoding: str, doc: Document | None = None,
             head_only: bool = False, grow: bool = False) -> None:
        """Prefill the prompt for `cursor` in the background (lowest priority; any request
        preempts it). `doc`: a detached document to warm instead of the stored one.
        `head_only`: only the package head of the files open now (`_package_head`).
        `grow`: the cursor's prompt with the whole window; once it is in, the document's
        prompts take that window (a warm of the short one asks for it when done)."""
        config, backend = self.config_ref(), self.backend_ref()
        worker = self._local_worker()
        remote = getattr(backend, "warm", None)  # backends.routing.Router.warm
        if not (config.enabled and config.warm) or backend is None or (worker is None and remote is None):
            return
        task = asyncio.create_task(self._warm_logged(backend, worker, cursor, encoding, doc,
                                                     head_only, grow))
        self._warms.add(task)
        task.add_done_callback(self._warms.discard)

    def warming(self) -> bool:
        """A warm not yet ended: its prompt may still be on its way to the backend, which
        then does not count it busy yet (specfill/stats' `idle` waits for both)."""
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

    def _other_files(self, doc: Document, config: Config, exclude: str | None = None) -> list[SourceFile]:
        """The files other-file context is drawn from: for the package head the open ones in
        the order they were opened (a file opened later appends to it), else the open and
        recently edited ones, newest first. `exclude`: the document left out (default `doc`)."""
        exclude = doc.uri if exclude is None else exclude
        docs = (self.documents.opened(doc.language_id, exclude) if package_head(config) else
                self.documents.recent(doc.language_id, exclude))
        return [source_file(d) for d in docs]

    def _package_head(self, doc: Document, config: Config, codec: PromptCodec) -> list[int]:
        """The head of a prompt in a file opened next, with every open file of `doc`'s language."""
        return package_head_ids(self._other_files(doc, config, exclude=""), self.roots, doc.language_id,
                                config.contextWindow.extraTokens, codec.encode, codec.repo)

    async def _warm_logged(self, *args: Any) -> None:
        try:
            await self._warm(*args)
        except Exception:  # a warm is a hint: never an error the user sees
            log.exception("warm failed")

    async def _warm(self, backend: Backend, worker: Any, cursor: Cursor, encoding: str,
                    detached: Document | None, head_only: bool = False, grow: bool = False) -> None:
        config = self.config_ref()
        if not await backend.wait_ready(config.readyTimeoutS):
            return
        doc = detached or self.documents.get(cursor.uri)
        running = self.inflight.get(cursor.uri)
        if doc is None or doc.problem or (running is not None and not running.task.done()):
            return  # closed, out of sync, or a real request is prefilling this document anyway
        cursor = replace(cursor, version=doc.version)
        if worker is None:  # a remote server: the very prompt a request here would send
            request = self._prepare(doc, cursor, encoding, config, backend.codec()).request
            backend.warm(request, self._remote_warm_done)
            return
        prepared = self._prepare(doc, cursor, encoding, config, backend.codec(), grow)
        if grow and prepared.window_line in (None, self.windows.get(doc.uri, (None,))[0]):
            return  # the window is already whole
        policy = replace(prepared.request.request.policy, max_new_tokens=0)
        request = replace(prepared.request.request, id=prepared.request.id + "-warm", policy=policy)
        head = self._package_head(doc, config, backend.codec()) if head_only else []
        if head:
            request = replace(request, prompt_ids=tuple(head), heal="")
        final = None
        async for event in worker.submit(request, warm=True):
            if isinstance(event, Finished):
                final = event
        if final is None:
            return
        self.stats.warm(final.reason, final.stats)
        if final.reason != "warm" or detached is not None or head_only:
            return
        if not grow:  # the cursor's short window is in; while the user rests, the whole one
            self.warm(cursor, encoding, grow=True)
        elif self.documents.get(cursor.uri) is doc and doc.version == cursor.version:
            first = self.windows.get(doc.uri, (0, 0, config.contextWindow.firstPrefixTokens))[2]
            self.windows[doc.uri] = (prepared.window_line, prepared.window_tokens, first)  # now whole

    def _remote_warm_done(self, outcome: Any) -> None:
        """`outcome`: a backends.warming.WarmOutcome, counted with the local warms."""
        self.stats.warm(outcome.reason, Stats(prompt_tokens=outcome.prompt_tokens,
                                              prefilled_tokens=outcome.evaluated_tokens))

    # -- the next suggestion, ready on accept (server/precompute.py) ----------------------

    def _after_shown(self, cursor: Cursor, encoding: str, text: str) -> None:
        config = self.config_ref()
        if not (config.precompute and config.warm and config.temperature <= 0
                and self._local_worker() is not None):
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
        worker, backend = self._local_worker(), self.backend_ref()
        state = item.state
        if worker is None or backend is None or self.documents.get(state.uri) is not doc \
                or doc.text[:offset] + item.inserted + doc.text[offset:] != state.text:
            return  # the document moved on: the guess is void
        accepted = self.documents.detached(doc, offset, item.inserted)
        cursor = Cursor(state.uri, doc.version, state.line, state.character)
        prepared = self._prepare(accepted, cursor, encoding, self.config_ref(), backend.codec())
        request = replace(prepared.request.request, id=prepared.request.id + "-next", background=True)
        # Called even when the chain is cancelled before the end (then a preempted job).
        on_final = lambda event: self.precomputes.finished(  # noqa: E731
            item, self.stats.background(event.stats))
        try:
            async for _event in worker.submit(request, on_final, warm=True):
                pass
        except Exception:  # a precompute is a guess: never an error the user sees
            log.exception("precompute failed")

    def _settle_precomputes(self, doc: Document, cursor: Cursor, encoding: str) -> None:
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

    # -- completions ----------------------------------------------------------------------

    async def complete(self, cursor: Cursor, encoding: str, msg_id: Any) -> str | None:
        """The cleaned completion text, or None when there is nothing to offer."""
        config, backend = self.config_ref(), self.backend_ref()
        worker = self._local_worker()
        if worker is not None:  # any real request stops background work, at once
            worker.preempt_warms()
        doc = self.documents.get(cursor.uri)
        if not config.enabled or backend is None:
            return None
        if doc is None:
            self.tell_user(f"specfill: {cursor.uri} is not open on the server; reopen the file.",
                           key="not-open")
            return None
        if doc.problem:  # out of sync or too large: said once when it happened
            log.debug("no completion for %s: %s", cursor.uri, doc.problem)
            return None
        if not await backend.wait_ready(config.readyTimeoutS):
            why = backend.load_error or f"models still loading after {config.readyTimeoutS:.0f} s"
            self.tell_user(f"specfill: no completion ({why}). "
                           + ("Check the model settings or run `specfill doctor`."
                              if backend.load_error else "Try again in a moment."), key="not-ready")
            return None
        cursor = replace(cursor, version=doc.version)
        self._settle_precomputes(doc, cursor, encoding)
        generation = self.inflight.get(cursor.uri)
        view = None
        if generation is not None and not generation.task.done():
            view = (View(cursor, generation.suffix) if generation.cursor == cursor else
                    self._join_typed(generation, doc, cursor, encoding, config))
        if view is None and generation is not None:  # superseded: the client moved on
            generation.task.cancel()
            # Stop the model now, not when the loop next runs the cancelled task: the
            # prompt below is then built on free cores, not beside a decode holding both
            # (a type-through answer, which needs no model call, waited on that).
            backend.abort(generation.request_id)
        if view is None and cursor.uri in self.ended:
            answer = self._answer_typed(self.ended[cursor.uri], doc, cursor, encoding, config, msg_id)
            if answer is not None:
                return answer or None
        if view is None:
            prepared = self._prepare(doc, cursor, encoding, config, backend.codec())
            generation = Generation(cursor, prepared.request.id, prepared.suffix, doc.text,
                                    doc.offset_at(cursor.line, cursor.character, encoding))
            view = View(cursor, prepared.suffix)
            generation.task = asyncio.create_task(self._run(backend, prepared, generation, encoding))
            self.inflight[cursor.uri] = generation
            generation.task.add_done_callback(lambda _t, g=generation: self._forget(g))
        return await self._follow(generation, msg_id, view)

    def _join_typed(self, generation: Generation, doc: Document, cursor: Cursor, encoding: str,
                    config: Config) -> View | None:
        """Type-through on a remote stream: the document is the generation's, plus text
        that generation streamed, typed at its cursor, and the cursor after it. Then the
        rest of that stream is this request's answer too, and the server is not asked
        again. Greedy only. The local engine does this itself, token-exactly, from its
        lineages (engine/lineage.py); a server's tokens are not seen here, so this is the
        text-level form: what a greedy server would stream for the new prompt where its
        tokenizer splits the typed text as it generated it."""
        if self._local_worker() is not None or config.temperature > 0 or not generation.doc_text:
            return None
        old, offset = generation.doc_text, generation.offset
        typed = doc.text[offset:offset + len(doc.text) - len(old)]
        if not typed or not generation.raw.startswith(typed) or \
                doc.text != old[:offset] + typed + old[offset:] or \
                doc.offset_at(cursor.line, cursor.character, encoding) != offset + len(typed):
            return None
        self.stats.joined()
        return View(cursor, generation.suffix, typed)

    def _answer_typed(self, ended: Generation, doc: Document, cursor: Cursor, encoding: str,
                      config: Config, msg_id: Any) -> str | None:
        """Type-through on a remote stream that ended by itself (an end of text or the stop
        rule, where a fresh greedy request ends too): its rest, at once. None: not typed
        through it."""
        view = self._join_typed(ended, doc, cursor, encoding, config)
        if view is None:
            return None
        view.final = view.text(ended.raw, final=True)
        self.notify(_update(msg_id, view, view.final, done=True))
        if view.final.strip():
            self._after_shown(cursor, encoding, view.final)
        return view.final

    async def _follow(self, generation: Generation, msg_id: Any, view: View) -> str | None:
        generation.followers[msg_id] = view
        self._stream_update(generation)  # a joining request gets what is known at once
        try:
            await asyncio.shield(generation.task)
            return view.final if view.final.strip() else None
        except asyncio.CancelledError:
            if generation.followers.pop(msg_id, None) is not None:  # its stream has not ended yet
                self.notify(_update(msg_id, view, "", done=True))
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
                   encoding: str = "utf-16") -> None:
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
        if final.reason == "unavailable":  # no server could serve: the router told the user
            self.stats.outcome(context, "error", final.stats)
            self._end_streams(generation, None)
            return
        if final.reason == "error":
            self.stats.outcome(context, "error", final.stats)
            self._end_streams(generation, None)
            if not backend.failed:  # a failed worker is restarted, and that is what the user hears
                self.tell_user(f"specfill: completion failed: {final.error}", key="completion-failed")
            return
        text = clean(final.text, prepared.suffix, final=True)
        generation.raw = final.text
        if final.reason in ("eos", "stop-rule") and self._local_worker() is None:
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
            self._after_shown(newest.cursor, encoding, newest.final)

    def _stream_update(self, generation: Generation) -> None:
        for msg_id, view in list(generation.followers.items()):
            text = view.text(generation.raw)
            if text != view.shown and text.strip():
                view.shown = text
                self.notify(_update(msg_id, view, text, done=False))

    def _end_streams(self, generation: Generation, final_raw: str | None) -> None:
        """done:true to every request still following: its final text, or "" (no answer)."""
        ended = list(generation.followers.items())
        generation.followers.clear()
        for msg_id, view in ended:
            view.final = view.text(final_raw, final=True) if final_raw is not None else ""
            self.notify(_update(msg_id, view, view.final, done=True))


def _update(msg_id: Any, view: View, text: str, done: bool) -> StreamUpdate:
    cursor = view.cursor
    return StreamUpdate(cursor.uri, cursor.version, {"line": cursor.line, "character": cursor.character},
                        msg_id, text, done)
