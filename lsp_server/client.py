"""A small scripted LSP client for specfill: starts the real server over stdio and talks
to it as an editor would. The demo and `specfill bench lsp` are built on it.

Every streamed `specfill/streamCompletion` notification is kept with its arrival time
(`time.monotonic()`), keyed by the JSON-RPC id of the request it belongs to, so a caller
can measure request -> first streamed text -> final answer from the client's side.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.lsp.client import LanguageClient
from pygls.protocol import JsonRPCResponseMessage, default_converter

from lsp_server.completion.protocol import (CONFIG_SECTION, STATS_REQUEST, STREAM_NOTIFICATION,
                                            WARM_NOTIFICATION, as_plain)

def _plain_results():
    """pygls's converter, but the result of a request it has no type for (specfill/stats)
    stays the JSON object it was: pygls makes namedtuples of it, which rename every key that
    is not an identifier ("simple_body/line" came back as "_1")."""
    converter = default_converter()
    converter.register_structure_hook(JsonRPCResponseMessage, lambda obj, cls: cls(**obj))
    return converter


# What `complete` raises for a request the server cancelled; callers (the benchmarks) catch
# it by this name without importing pygls.
RequestCancelled = JsonRpcRequestCancelled

SERVER_COMMAND = (sys.executable, "-m", "lsp_server", "serve", "--stdio")


@dataclass(frozen=True)
class StreamEvent:
    t: float  # time.monotonic() when the notification arrived
    request_id: Any
    text: str  # the whole completion so far
    done: bool


@dataclass
class Timings:
    """Client-side times of one inline completion request, all `time.monotonic()`."""

    sent: float
    answered: float
    updates: list[StreamEvent] = field(default_factory=list)

    @property
    def first_text(self) -> float | None:
        """When the first non-blank streamed text arrived (the first ghost text)."""
        return next((u.t for u in self.updates if u.text.strip()), None)

    @property
    def first_text_s(self) -> float | None:
        first = self.first_text
        return None if first is None else first - self.sent

    @property
    def final_s(self) -> float:
        return self.answered - self.sent


@dataclass(frozen=True)
class Message:
    t: float
    kind: str  # "show" (window/showMessage) or "log" (window/logMessage)
    type: int  # lsp.MessageType
    text: str


def completion_text(result: Any) -> str:
    """The first item's insert text of an inlineCompletion result ("" when none)."""
    items = getattr(result, "items", result) or []
    if not items:
        return ""
    text = items[0].insert_text
    return text if isinstance(text, str) else text.value  # a StringValue snippet


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class SpecfillClient:
    """`async with SpecfillClient(options) as client:` starts, initializes and finally
    shuts down one server process."""

    def __init__(self, options: dict | None = None, command: Sequence[str] = SERVER_COMMAND,
                 stderr_log: Path | None = None,
                 on_message: Callable[[Message], None] | None = None,
                 root_uri: str | None = None):
        self.options = options or {}
        self.root_uri = root_uri
        self.command = list(command)
        self.stderr_log = stderr_log
        self.on_message = on_message
        self.lc = LanguageClient("specfill-scripted-client", "0.1", converter_factory=_plain_results)
        self.streams: dict[Any, list[StreamEvent]] = {}
        self.messages: list[Message] = []
        self.stderr_tail: deque[str] = deque(maxlen=200)
        self.init_result: lsp.InitializeResult | None = None
        self._watchers: dict[Any, Callable[[StreamEvent], None]] = {}
        self._ids = itertools.count(1)
        self._stderr_task: asyncio.Task | None = None
        self._register_handlers()

    # -- lifecycle ----------------------------------------------------------------

    async def __aenter__(self) -> "SpecfillClient":
        try:
            await self.start()
        except BaseException:
            await self.shutdown()  # never leave a half-started server behind
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    async def start(self) -> lsp.InitializeResult:
        await self.lc.start_io(*self.command)
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        params = lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(
                general=lsp.GeneralClientCapabilities(
                    position_encodings=[lsp.PositionEncodingKind.Utf16])),
            initialization_options=self.options, root_uri=self.root_uri)
        self.init_result = await self.lc.initialize_async(params)
        self.lc.initialized(lsp.InitializedParams())
        return self.init_result

    async def shutdown(self, timeout_s: float = 20.0) -> None:
        process = self.lc._server  # pygls keeps the subprocess here
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(self.lc.shutdown_async(None), timeout_s)
                self.lc.exit(None)
                await asyncio.wait_for(process.wait(), timeout_s)
            except (asyncio.TimeoutError, RuntimeError, ConnectionError):
                process.kill()  # a server that does not exit must not outlive its client
                await process.wait()
        await self.lc.stop()
        if self._stderr_task is not None:
            await self._stderr_task

    @property
    def returncode(self) -> int | None:
        process = self.lc._server
        return None if process is None else process.returncode

    # -- documents ----------------------------------------------------------------

    def open(self, uri: str, language: str, text: str, version: int = 1) -> None:
        self.lc.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))

    def close(self, uri: str) -> None:
        self.lc.text_document_did_close(lsp.DidCloseTextDocumentParams(
            lsp.TextDocumentIdentifier(uri=uri)))

    def change(self, uri: str, version: int, edits: Sequence[tuple[lsp.Range, str]]) -> None:
        """Incremental edits, applied in order (LSP semantics)."""
        changes = [lsp.TextDocumentContentChangePartial(range=r, text=t) for r, t in edits]
        self.lc.text_document_did_change(lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), changes))

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        here = lsp.Position(line=line, character=character)
        self.change(uri, version, [(lsp.Range(start=here, end=here), text)])

    def replace_all(self, uri: str, version: int, old_text: str, new_text: str) -> None:
        """One incremental edit over the whole of `old_text` (the document as the server has it)."""
        lines = old_text.split("\n")
        end = lsp.Position(line=len(lines) - 1, character=utf16_len(lines[-1]))
        self.change(uri, version, [(lsp.Range(start=lsp.Position(line=0, character=0), end=end), new_text)])

    def configure(self, settings: dict) -> None:
        """workspace/didChangeConfiguration with specfill's section, as editors send it."""
        self.lc.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={CONFIG_SECTION: settings}))

    # -- completions --------------------------------------------------------------

    def next_id(self) -> str:
        return f"specfill-client-{next(self._ids)}"

    def send_completion(self, uri: str, line: int, character: int, msg_id: Any,
                        invoked: bool = True) -> asyncio.Future:
        """Send the request and return its future at once (for callers that keep typing)."""
        self.streams.setdefault(msg_id, [])
        trigger = (lsp.InlineCompletionTriggerKind.Invoked if invoked
                   else lsp.InlineCompletionTriggerKind.Automatic)
        params = lsp.InlineCompletionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=line, character=character),
            context=lsp.InlineCompletionContext(trigger_kind=trigger))
        return self.lc.protocol.send_request_async(
            lsp.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)

    async def complete(self, uri: str, line: int, character: int, msg_id: Any = None, *,
                       invoked: bool = True,
                       on_update: Callable[[StreamEvent], None] | None = None,
                       ) -> tuple[str, Timings]:
        """The completion text ("" for none) and its timings. A cancelled request raises
        `RequestCancelled`."""
        msg_id = self.next_id() if msg_id is None else msg_id
        if on_update is not None:
            self._watchers[msg_id] = on_update
        sent = time.monotonic()
        try:
            result = await self.send_completion(uri, line, character, msg_id, invoked)
        finally:
            self._watchers.pop(msg_id, None)
        return completion_text(result), Timings(sent, time.monotonic(), self.streams[msg_id])

    def warm(self, uri: str, line: int, character: int) -> None:
        """specfill/warm: the cursor rests here (as the editor clients send it)."""
        self.lc.protocol.notify(WARM_NOTIFICATION, {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character}})

    def cancel(self, msg_id: Any) -> None:
        self.lc.cancel_request(lsp.CancelParams(id=msg_id))

    # -- server state -------------------------------------------------------------

    async def stats(self) -> dict:
        return as_plain(await self.lc.protocol.send_request_async(STATS_REQUEST, None))

    async def wait_ready(self, timeout_s: float = 600.0, poll_s: float = 0.2) -> dict:
        """Stats once the models are loaded; raises with the server's reason otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.returncode is not None:
                raise RuntimeError(f"the server exited ({self.returncode}):\n" + self.stderr_text())
            s = await self.stats()
            engine = s["engine"]
            if engine["ready"]:
                return s
            if engine["load_error"]:
                raise RuntimeError(f"model loading failed: {engine['load_error']}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"models not loaded after {timeout_s:.0f} s")
            await asyncio.sleep(poll_s)

    async def wait_message(self, needle: str, timeout_s: float = 10.0, poll_s: float = 0.02) -> bool:
        """Whether a window/showMessage or logMessage containing `needle` arrives in time
        (the server logs "models ready" up to one progress poll after it is ready)."""
        deadline = time.monotonic() + timeout_s
        while not any(needle in m.text for m in self.messages):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    async def wait_idle(self, timeout_s: float = 30.0, poll_s: float = 0.02) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (await self.stats())["engine"]["idle"]:
                return True
            await asyncio.sleep(poll_s)
        return False

    def stderr_text(self) -> str:
        return "".join(self.stderr_tail)

    # -- plumbing -----------------------------------------------------------------

    def _register_handlers(self) -> None:
        @self.lc.feature(STREAM_NOTIFICATION)
        def on_stream(params: Any) -> None:
            p = as_plain(params)
            event = StreamEvent(time.monotonic(), p.get("requestId"), p.get("text", ""),
                                bool(p.get("done")))
            self.streams.setdefault(event.request_id, []).append(event)
            watcher = self._watchers.get(event.request_id)
            if watcher is not None:
                watcher(event)

        def keep(kind: str) -> Callable[[Any], None]:
            def handler(params: Any) -> None:
                message = Message(time.monotonic(), kind, int(params.type), params.message)
                self.messages.append(message)
                if self.on_message is not None:
                    self.on_message(message)
            return handler

        self.lc.feature(lsp.WINDOW_SHOW_MESSAGE)(keep("show"))
        self.lc.feature(lsp.WINDOW_LOG_MESSAGE)(keep("log"))

    async def _drain_stderr(self) -> None:
        """Read the server's stderr so a chatty server never blocks on a full pipe."""
        stream = self.lc._server.stderr
        log = self.stderr_log.open("w", encoding="utf-8") if self.stderr_log else None
        try:
            while line := await stream.readline():
                text = line.decode("utf-8", errors="replace")
                self.stderr_tail.append(text)
                if log is not None:
                    log.write(text)
                    log.flush()
        finally:
            if log is not None:
                log.close()
