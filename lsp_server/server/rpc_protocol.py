"""The JSON-RPC layer under the handlers: every request gets exactly one response, and
nothing the client sent (document text, completions) reaches an error message.

pygls 2.1.1 structures each message inside `json.loads(object_hook=...)`; a body that does
not fit the method's params type (`line: -1`, `params: null`, `"position": "here"`) is
logged and dropped, so the editor waits forever. Here `structure_message` only parses, and
`handle_message` checks the envelope and structures the params itself, answering -32600
(not a request) or -32602 (bad params) with a short message. Handler exceptions become
-32603 "internal error (KeyError)" without pygls' traceback in `data`. A body that is not
JSON gets -32700 (see `SpecfillServer.report_server_error`).

pygls also keeps its own copy of every open document (its `Workspace`), raising KeyError
for a didChange of an unknown URI; the server keeps documents in `DocumentStore`, so the
built-in didOpen/didChange/didClose here only pass the params on.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from cattrs import transform_error
from lsprotocol import types as lsp
from pygls.exceptions import FeatureNotificationError, JsonRpcException
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage

log = logging.getLogger(__name__)

# Notifications whose field pygls uses as a dict key: cattrs lets `{}` through as an id.
_KEY_FIELDS = {lsp.CANCEL_REQUEST: "id", lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL: "token"}

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32602, -32603


def short_problems(exc: Exception, limit: int = 3) -> str:
    """What was wrong with the params, as cattrs words it: paths and expected types, never
    the values (a value can be a whole document)."""
    try:
        problems = [p.replace("$.params", "params") for p in transform_error(exc)]
    except Exception:  # not a cattrs error: its text may quote the value, so leave it out
        problems = [type(exc).__name__]
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(p[:120] for p in problems[:limit]) + more


def frames_only(exc: BaseException) -> str:
    """The traceback's frames without the exception's message (which may quote user text)."""
    return "".join(traceback.format_tb(exc.__traceback__)).rstrip()


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _valid_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


class SpecfillProtocol(LanguageServerProtocol):
    # -- reading: parse only, then check and structure in handle_message ------------

    def structure_message(self, data: dict) -> Any:
        return data  # called for every nested object by json.loads; structuring is below

    def handle_message(self, message: Any) -> None:  # type: ignore[override]
        structured = self._structure(message)
        if structured is not None:
            super().handle_message(structured)

    def _structure(self, data: Any) -> Any:
        if not isinstance(data, dict):
            what = "a batch (array)" if isinstance(data, list) else type(data).__name__
            return self._reject(None, INVALID_REQUEST, f"Invalid request: {what}, not an object")
        msg_id, method = data.get("id"), data.get("method")
        has_id = "id" in data
        if method is None and has_id and ("result" in data or "error" in data):
            return self._structure_response(data)
        reply_id = msg_id if _valid_id(msg_id) else None
        if data.get("jsonrpc") != "2.0":
            return self._reject(reply_id, INVALID_REQUEST, 'Invalid request: jsonrpc must be "2.0"')
        if not isinstance(method, str):
            return self._reject(reply_id, INVALID_REQUEST, "Invalid request: method must be a string")
        if has_id and not _valid_id(msg_id):
            return self._reject(None, INVALID_REQUEST, "Invalid request: id must be a string or an integer")
        if self._shutdown and method != lsp.EXIT:
            if has_id:
                return self._reject(msg_id, INVALID_REQUEST, "Invalid request: the server is shutting down")
            return None
        if has_id:
            return self._structure_as(data, self.get_message_type(method) or JsonRPCRequestMessage)
        structured = self._structure_as(data, self.get_message_type(method) or JsonRPCNotification)
        key = _KEY_FIELDS.get(method)
        if structured is not None and key and not _valid_id(getattr(structured.params, key)):
            log.warning("dropped %s: its %s is not a string or an integer", method, key)
            return None
        return structured

    def _structure_as(self, data: dict, message_type: type) -> Any:
        # JSON-RPC lets a message omit `params` (`specfill/stats`, `initialized` from some
        # clients); pygls' types insist on the field.
        missing = data.get("params") is None
        try:
            return self._converter.structure({**data, "params": data.get("params")}, message_type)
        except Exception as exc:
            if missing:  # an empty params object is what "no params" means for most types
                try:
                    return self._converter.structure({**data, "params": {}}, message_type)
                except Exception:
                    pass
            problems = short_problems(exc)
        method = data["method"]
        if "id" in data:
            return self._reject(data["id"], INVALID_PARAMS, f"Invalid params for {method}: {problems}")
        log.warning("dropped %s notification with invalid params: %s", method, problems)
        return None

    def _structure_response(self, data: dict) -> Any:
        try:
            return super().structure_message(data)
        except Exception:
            log.warning("dropped a malformed response from the client (id %r)", data.get("id"))
            return None

    def _reject(self, msg_id: Any, code: int, message: str) -> None:
        log.warning("answered %s: %s", code, message)
        self.send_error(msg_id, code, message)
        return None

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        if msg_id is None:  # lsprotocol's converter would drop the null id JSON-RPC requires
            self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
            return
        self._send_response(msg_id, error=lsp.ResponseError(code=code, message=message))

    # -- handler outcomes: no tracebacks or exception texts to the client -----------

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        # pygls files every async, threaded or generator handler's future under an id and
        # only requests' answers take it out again: notifications (every didChange) and the
        # inner steps of its built-in handlers would stay in `_request_futures` for good.
        def forget_then(future: Any) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, forget_then, args, kwargs)

    def _send_handler_result(self, future: Any, *, msg_id: Any) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is None or isinstance(exc, JsonRpcException):
            super()._send_handler_result(future, msg_id=msg_id)
            return
        self._request_futures.pop(msg_id, None)
        name = type(exc).__name__
        log.error("request %r failed with %s\n%s", msg_id, name, frames_only(exc))
        self.send_error(msg_id, INTERNAL_ERROR,
                        f"specfill: internal error ({name}); the server log has the details")

    def _check_handler_result(self, future: Any) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            name = type(exc).__name__
            log.error("a notification handler failed with %s\n%s", name, frames_only(exc))
            self._server.report_server_error(exc, FeatureNotificationError)

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams):
        # pygls turns rootPath into a URI and raises on text that is not valid UTF-8 (a
        # lone surrogate); a root we cannot name is no root.
        if params.root_path is not None and not _encodable(params.root_path):
            log.warning("initialize: rootPath is not valid UTF-8; ignored")
            params.root_path = None
        return (yield from super().lsp_initialize(params))

    # -- documents live in DocumentStore, not in pygls' workspace ------------------

    @lsp_method(lsp.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: lsp.DidOpenTextDocumentParams):
        if (handler := self.fm.features.get(lsp.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: lsp.DidChangeTextDocumentParams):
        if (handler := self.fm.features.get(lsp.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: lsp.DidCloseTextDocumentParams):
        if (handler := self.fm.features.get(lsp.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None


def quiet_pygls(level: int) -> None:
    """pygls logs every outgoing message at INFO ("Sending data: ..."), completions and all:
    keep its INFO lines out of the editor's output panel unless the user asked for debug."""
    logging.getLogger("pygls").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)
