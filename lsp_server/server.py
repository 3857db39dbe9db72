"""The language server: thin pygls handlers over documents, the completion service and
the engine worker. Nothing here blocks the event loop on a model."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Callable

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from lsp_server import __version__
from lsp_server.completion import CompletionService, Cursor
from lsp_server.config import Config, config_from_options, model_identity
from lsp_server.documents import DocumentStore
from lsp_server.engine.worker import EngineWorker
from lsp_server.context.cross_file import uri_path
from lsp_server.lsp_client import as_plain
from lsp_server.protocol import (CONFIG_SECTION, STATS_REQUEST, STREAM_NOTIFICATION,
                                 WARM_NOTIFICATION, StreamUpdate)
from lsp_server.server_stats import ServerStats

log = logging.getLogger(__name__)
RuntimeFactory = Callable[[Config, Callable[[str], None]], Any]


class SpecfillProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict) -> Any:
        # JSON-RPC lets a request omit `params` (`specfill/stats` has none); pygls's
        # generic message type for custom methods insists on the field.
        if "method" in data and "params" not in data:
            data = {**data, "params": None}
        return super().structure_message(data)


class SpecfillServer(LanguageServer):
    def __init__(self, runtime_factory: RuntimeFactory | None = None):
        super().__init__("specfill", __version__, protocol_cls=SpecfillProtocol,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        if runtime_factory is None:
            from lsp_server.runtime import load_runtime as runtime_factory
        self.runtime_factory = runtime_factory
        self.config = Config()
        self.documents = DocumentStore()
        self.stats = ServerStats()
        self.worker: EngineWorker | None = None
        self.completions = CompletionService(
            self.documents, lambda: self.worker, lambda: self.config, self.send_stream,
            self.tell_user, self.stats)

    # -- helpers used by the handlers -------------------------------------------

    @property
    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or "utf-16")

    def send_stream(self, update: StreamUpdate) -> None:
        self.protocol.notify(STREAM_NOTIFICATION, update.to_json())

    def tell_user(self, message: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        log.warning(message)
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def apply_settings(self, options: Any) -> None:
        new, problems = config_from_options(options, self.config)
        for problem in problems:
            self.tell_user(f"specfill: {problem}")
        reload = self.worker is not None and model_identity(new) != model_identity(self.config)
        self.config = new
        if reload:
            self.tell_user("specfill: model settings changed; reloading the models.",
                           lsp.MessageType.Info)
            self.start_worker()

    def start_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        config = self.config
        self.worker = EngineWorker(lambda progress: self.runtime_factory(config, progress),
                                   threads=config.model.threads or None)
        self.worker.start()
        asyncio.ensure_future(report_loading(self, self.worker))


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


def create_server(runtime_factory: RuntimeFactory | None = None) -> SpecfillServer:
    server = SpecfillServer(runtime_factory)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: SpecfillServer, params: lsp.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)
        folders = [f.uri for f in params.workspace_folders or []] or [params.root_uri or ""]
        ls.completions.roots = [uri_path(uri) for uri in folders if uri]

    @server.feature(lsp.INITIALIZED)
    def initialized(ls: SpecfillServer, params: lsp.InitializedParams) -> None:
        ls.start_worker()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: SpecfillServer, params: lsp.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.documents.open(d.uri, d.language_id, d.version, d.text)
        ls.completions.warm_end_of(d.uri, ls.encoding)

    @server.feature(WARM_NOTIFICATION)
    def warm(ls: SpecfillServer, params: Any) -> None:
        cursor = warm_cursor(as_plain(params))
        if cursor is None:
            log.warning("specfill/warm needs {textDocument: {uri}, position: {line, character}}; "
                        "got %r", params)
        else:
            ls.completions.warm(cursor, ls.encoding)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: SpecfillServer, params: lsp.DidChangeTextDocumentParams) -> None:
        d = params.text_document
        outcome = ls.documents.change(d.uri, d.version, params.content_changes, ls.encoding)
        if outcome.error:
            ls.tell_user(f"specfill: {outcome.error}")
        elif outcome.warning:
            log.warning(outcome.warning)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: SpecfillServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.documents.close(params.text_document.uri)
        ls.completions.cross_file.forget(params.text_document.uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: SpecfillServer, params: lsp.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and CONFIG_SECTION in settings:
            settings = settings[CONFIG_SECTION]
        ls.apply_settings(settings)

    @server.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
    async def inline_completion(
        ls: SpecfillServer, params: lsp.InlineCompletionParams,
    ) -> lsp.InlineCompletionList:
        pos = params.position
        cursor = Cursor(params.text_document.uri, 0, pos.line, pos.character)
        text = await ls.completions.complete(cursor, ls.encoding, ls.protocol.msg_id)
        if not text:
            return lsp.InlineCompletionList(items=[])
        here = lsp.Range(start=pos, end=pos)
        return lsp.InlineCompletionList(items=[lsp.InlineCompletionItem(insert_text=text, range=here)])

    @server.feature(STATS_REQUEST)
    def stats(ls: SpecfillServer, params: Any) -> dict:
        worker = ls.worker
        engine = getattr(worker.engine, "engine", None) if worker else None
        memory = engine.memory.snapshot() if engine is not None else {}
        out = ls.stats.to_json(memory)
        out["engine"] = {
            "ready": bool(worker and worker.ready.is_set()),
            "idle": bool(worker is None or worker.is_idle()),
            "load_error": worker.load_error if worker else None,
            "abort_latencies_s": list(worker.abort_latencies_s) if worker else [],
            "preempt_latencies_s": list(worker.preempt_latencies_s) if worker else [],
        }
        return out

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: SpecfillServer, params: Any) -> None:
        if ls.worker is not None:
            ls.worker.stop()

    return server
