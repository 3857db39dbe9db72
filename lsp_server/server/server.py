"""The language server: thin pygls handlers over documents, the completion service and
the engine worker. Nothing here blocks the event loop on a model."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from typing import Any, Callable

from lsprotocol import types as lsp
from pygls.exceptions import FeatureRequestError, JsonRpcException
from pygls.lsp.server import LanguageServer

from lsp_server import __version__
from lsp_server.backends.base import Backend, BackendStatus
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor
from lsp_server.completion.protocol import (CONFIG_SECTION, DOCUMENT_REQUEST, STATS_REQUEST,
                                            STREAM_NOTIFICATION, WARM_NOTIFICATION, StreamUpdate,
                                            as_plain, document_summary)
from lsp_server.completion.service import CompletionService
from lsp_server.completion.stats import ServerStats
from lsp_server.config import Config, config_from_options, model_identity
from lsp_server.context.cross_file import uri_path
from lsp_server.engine.worker import EngineWorker
from lsp_server.server.rpc_protocol import PARSE_ERROR, SpecfillProtocol

log = logging.getLogger(__name__)
RuntimeFactory = Callable[[Config, Callable[[str], None]], Any]


class SpecfillServer(LanguageServer):
    def __init__(self, runtime_factory: RuntimeFactory | None = None):
        super().__init__("specfill", __version__, protocol_cls=SpecfillProtocol,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        if runtime_factory is None:
            from lsp_server.backends.local_runtime import load_runtime as runtime_factory
        self.runtime_factory = runtime_factory
        self.config = Config()
        self.documents = DocumentStore()
        self.stats = ServerStats()
        self.worker: EngineWorker | None = None  # the local engine, when one is used
        self.backend: Backend | None = None  # what generates: local, remote, or both
        self.popups = RateLimiter()
        self.restarts = RestartBudget()
        self.given_up_on: EngineWorker | None = None
        self.notes = RateLimiter()
        self.completions = CompletionService(
            self.documents, lambda: self.backend, lambda: self.config, self.send_stream,
            self.tell_user, self.stats)

    # -- helpers used by the handlers -------------------------------------------

    @property
    def encoding(self) -> str:
        if self.protocol._workspace is None:  # before initialize: LSP's default
            return "utf-16"
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or "utf-16")

    def send_stream(self, update: StreamUpdate) -> None:
        self.protocol.notify(STREAM_NOTIFICATION, update.to_json())

    def tell_user(self, message: str, kind: lsp.MessageType = lsp.MessageType.Warning,
                  key: str | None = None) -> None:
        """A popup, at most one per `key` (default: the message itself) per minute."""
        if not self.popups.allow(key or message):
            log.debug("not shown again within a minute: %s", message)
            return
        log.warning(message)
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def recover_worker(self) -> None:
        """A worker that failed (a kernel raised, its thread died) has answered its requests;
        start a fresh one, a bounded number of times, and tell the user once each time."""
        worker = self.worker
        if worker is None or worker.failed is None or worker is self.given_up_on:
            return
        if self.restarts.allow():
            self.tell_user(f"specfill: the engine failed ({worker.failed}); restarting it "
                           f"({self.restarts.used} of {self.restarts.max_restarts}).",
                           lsp.MessageType.Warning, key=f"engine-restart-{id(worker)}")
            self.start_worker()
        else:
            self.given_up_on = worker
            self.tell_user(f"specfill: the engine failed {self.restarts.max_restarts + 1} times "
                           f"in {self.restarts.window_s / 60:.0f} minutes ({worker.failed}); "
                           "completions are off until the server is restarted.",
                           lsp.MessageType.Error, key="engine-gave-up")

    def table_sizes(self) -> dict[str, int]:
        worker = self.worker
        return {
            "pygls_request_futures": len(self.protocol._request_futures),
            "pygls_result_types": len(self.protocol._result_types),
            "inflight_generations": len(self.completions.inflight),
            "worker_active_jobs": worker.active_jobs() if worker else 0,
            "documents": len(self.documents),
        }

    def log_once(self, message: str, key: str) -> None:
        """A client's protocol mistake: one log line per `key` a minute, never a popup."""
        if self.notes.allow(key):
            log.warning(message)
        else:
            log.debug(message)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' out-of-band errors. Its default shows "Error in server: <exception text>";
        here the text stays out (it can quote the document) and bodies that are not JSON
        are answered -32700, as JSON-RPC asks."""
        if source is FeatureRequestError:
            return  # already answered by the protocol
        if source is JsonRpcException and isinstance(error, (ValueError, RecursionError)):
            log.warning("answered %s: the message body is not JSON (%s)", PARSE_ERROR,
                        type(error).__name__)
            self.protocol.send_error(None, PARSE_ERROR, "Parse error: the message body is not JSON")
            return
        self.tell_user(f"specfill: internal error ({type(error).__name__}); the server log "
                       "has the details.", lsp.MessageType.Error, key="internal-error")

    def apply_settings(self, options: Any) -> None:
        new, problems = config_from_options(options, self.config)
        for problem in problems:
            self.tell_user(f"specfill: {problem}")
        old = self.config
        reload = self.worker is not None and model_identity(new) != model_identity(old)
        if self.worker is not None and new.model.threads != old.model.threads:
            self.worker.set_threads(new.model.threads)  # applied before the next request
        self.config = new
        self.documents.max_bytes = int(new.maxDocumentMB * 2**20)
        if reload:
            self.tell_user("specfill: model settings changed; reloading the models.",
                           lsp.MessageType.Info)
        if self.backend is not None and (reload or new.backend != old.backend):
            self.start_worker()

    def start_worker(self) -> None:
        """(Re)build the backend; the local engine's worker starts only if it is used."""
        from lsp_server.backends.select import build_backend

        if self.backend is not None:
            self.backend.stop()
        self.worker = None
        self.backend = build_backend(self.config.backend, self._start_local, self.tell_user)

    def _start_local(self) -> Backend:
        from lsp_server.backends.local import LocalBackend

        config = self.config
        self.worker = EngineWorker(lambda progress: self.runtime_factory(config, progress),
                                   threads=config.model.threads or None)
        self.worker.start()
        asyncio.ensure_future(report_loading(self, self.worker))
        return LocalBackend(self.worker)


async def report_loading(ls: SpecfillServer, worker: EngineWorker) -> None:
    """Work-done progress and log messages while the worker loads the models."""
    token = str(uuid.uuid4())
    caps = ls.client_capabilities.window if ls.client_capabilities else None
    progress = bool(caps and caps.work_done_progress)
    if progress:
        try:
            await ls.work_done_progress.create_async(token)
            ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(title="specfill: loading models"))
        except Exception:  # a client may refuse the token; logs still tell the story
            progress = False
    seen = 0
    while not worker.ready.is_set() and worker.load_error is None:
        await asyncio.sleep(0.1)
        for line in worker.load_progress[seen:]:
            ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Info, f"specfill: {line}"))
            if progress:
                ls.work_done_progress.report(token, lsp.WorkDoneProgressReport(message=line))
        seen = len(worker.load_progress)
    done = "models ready" if worker.ready.is_set() else f"model loading failed: {worker.load_error}"
    if progress:
        ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=done))
    if worker.load_error:
        ls.tell_user(f"specfill: {done}. Run `specfill models fetch` or fix model.target / "
                     "model.draft, then reload.", lsp.MessageType.Error)
    else:
        ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Info, f"specfill: {done}"))


def warm_cursor(params: Any) -> Cursor | None:
    """The cursor of a `specfill/warm` notification, or None when it is malformed."""
    try:
        uri = params["textDocument"]["uri"]
        line, character = params["position"]["line"], params["position"]["character"]
    except (KeyError, TypeError):
        return None
    ok = isinstance(uri, str) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                      for v in (line, character))
    return Cursor(uri, 0, line, character) if ok else None


# The handlers: one module-level function per LSP method, each thin (read the params, call the
# documents, the completion service or the server's helpers, answer in lsprotocol types).
# `create_server` registers them on a fresh server; `handles` only records the method.
HANDLERS: list[tuple[str, Any, Callable[..., Any]]] = []


def handles(method: str, options: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def record(handler: Callable[..., Any]) -> Callable[..., Any]:
        HANDLERS.append((method, options, handler))
        return handler
    return record


def create_server(runtime_factory: RuntimeFactory | None = None) -> SpecfillServer:
    server = SpecfillServer(runtime_factory)
    for method, options, handler in HANDLERS:
        server.feature(method, options)(handler)
    return server


@handles(lsp.INITIALIZE)
def initialize(ls: SpecfillServer, params: lsp.InitializeParams) -> None:
    ls.apply_settings(params.initialization_options)
    folders = [f.uri for f in params.workspace_folders or []] or [params.root_uri or ""]
    ls.completions.roots = [uri_path(uri) for uri in folders if uri]


@handles(lsp.INITIALIZED)
def initialized(ls: SpecfillServer, params: lsp.InitializedParams) -> None:
    if ls.worker is None:  # a second `initialized` must not reload the models
        ls.start_worker()


@handles(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: SpecfillServer, params: lsp.DidOpenTextDocumentParams) -> None:
    d = params.text_document
    language = d.language_id if isinstance(d.language_id, str) else ""  # lsprotocol lets ints by
    doc = ls.documents.open(d.uri, language, d.version, d.text)
    if doc.problem:
        ls.log_once(f"no completions for {d.uri}: it is {doc.problem} (setting "
                    "maxDocumentMB)", key=f"too-large {d.uri}")
    else:
        ls.completions.warm_opened(d.uri, ls.encoding)


@handles(WARM_NOTIFICATION)
def warm(ls: SpecfillServer, params: Any) -> None:
    cursor = warm_cursor(as_plain(params))
    if cursor is None:
        log.warning("specfill/warm needs {textDocument: {uri}, position: {line, character}}; "
                    "got a %s", type(params).__name__)
    else:
        ls.completions.warm(cursor, ls.encoding)


@handles(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: SpecfillServer, params: lsp.DidChangeTextDocumentParams) -> None:
    d = params.text_document
    outcome = ls.documents.change(d.uri, d.version, params.content_changes, ls.encoding)
    doc = ls.documents.get(d.uri)
    # Typing through a suggestion keeps its precompute; any other edit drops it.
    ls.completions.precomputes.edited(d.uri, doc.text if doc is not None and not doc.problem else "")
    if outcome.error:
        ls.log_once(outcome.error, key="bad-change")
        return
    if outcome.warning:
        log.warning(outcome.warning)
    if outcome.problem and outcome.problem.startswith("out of sync"):
        # one line, no text; completions resume at the next didOpen or full-text change
        log.warning("%s is %s; no completions until it is reopened", d.uri, outcome.problem)
    elif outcome.problem:
        ls.log_once(f"no completions for {d.uri}: it is {outcome.problem} (setting "
                    "maxDocumentMB)", key=f"too-large {d.uri}")


@handles(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: SpecfillServer, params: lsp.DidCloseTextDocumentParams) -> None:
    ls.documents.close(params.text_document.uri)
    ls.completions.forget(params.text_document.uri)


@handles(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: SpecfillServer, params: lsp.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if isinstance(settings, dict) and CONFIG_SECTION in settings:
        settings = settings[CONFIG_SECTION]
    ls.apply_settings(settings)


@handles(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
async def inline_completion(ls: SpecfillServer, params: lsp.InlineCompletionParams) -> lsp.InlineCompletionList:
    pos = params.position
    cursor = Cursor(params.text_document.uri, 0, pos.line, pos.character)
    ls.recover_worker()
    try:
        text = await ls.completions.complete(cursor, ls.encoding, ls.protocol.msg_id)
    finally:
        ls.recover_worker()
    if not text:
        return lsp.InlineCompletionList(items=[])
    here = lsp.Range(start=pos, end=pos)
    return lsp.InlineCompletionList(items=[lsp.InlineCompletionItem(insert_text=text, range=here)])


@handles(STATS_REQUEST)
def stats(ls: SpecfillServer, params: Any) -> dict:
    status = ls.backend.status() if ls.backend is not None else BackendStatus(False, None)
    out = ls.stats.to_json(status.acceptance_memory)
    out["engine"] = engine_state(ls, status)
    # the pool of earlier prompts and generations the engine drafts from: fixed memory
    out["draft_pool"] = status.draft_pool
    # the round costs speculation is priced at: those timed at load, as live rounds moved them
    out["round_costs"] = status.round_costs
    out["tables"] = ls.table_sizes()  # per-request bookkeeping: must stay bounded
    out["backends"] = ls.backend.stats() if ls.backend is not None else []
    # what the prefill rate sized the window before the cursor of a file opened now to
    out["first_window_tokens"] = ls.completions.first_window_tokens()
    return out


def engine_state(ls: SpecfillServer, status: BackendStatus) -> dict:
    """The `engine` part of specfill/stats: the local worker's, or the remote backend's."""
    return {
        "ready": status.ready,
        "idle": bool(ls.backend is None or ls.backend.is_idle()) and not ls.completions.warming(),
        "load_error": status.load_error,
        "threads": status.threads,
        "abort_latencies_s": status.abort_latencies_s,
        "preempt_latencies_s": status.preempt_latencies_s,
    }


@handles(DOCUMENT_REQUEST)
def document_state(ls: SpecfillServer, params: Any) -> dict:
    uri = params.get("uri") if isinstance(params, dict) else getattr(params, "uri", None)
    doc = ls.documents.get(uri) if isinstance(uri, str) else None
    return document_summary(doc)


@handles(lsp.SHUTDOWN)
def shutdown(ls: SpecfillServer, params: Any) -> None:
    if ls.backend is not None:
        ls.backend.stop()


# -- how often: the user is told, a failed worker is restarted -------------------------


class RateLimiter:
    """At most one popup per kind of message per minute: a client stuck in a loop (a
    didChange for a closed file on every keystroke) must not bury the editor in popups; the
    log keeps every occurrence at debug level."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 max_kinds: int = 256):
        self.interval_s = interval_s
        self.clock = clock
        self.max_kinds = max_kinds  # kinds are few; the bound only guards against a flood of new ones
        self._last: dict[str, float] = {}

    def allow(self, kind: str) -> bool:
        """True when no message of `kind` was allowed within the last `interval_s`."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) >= self.max_kinds:
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
            if len(self._last) >= self.max_kinds:
                return False
        self._last[kind] = now
        return True


class RestartBudget:
    """A failed engine worker is restarted a few times, then the server gives up (a model
    that crashes on every request must not reload forever), like an editor that stops
    restarting a server after 5 crashes in 3 minutes."""

    def __init__(self, max_restarts: int = 3, window_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        """True (and counted) when fewer than `max_restarts` happened within the window."""
        now = self.clock()
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self._times)
