"""A hostile client over stdio: every request gets exactly one response, whatever its params.

Params are generated from lsprotocol's types for each method the server registers, then
mutated one point at a time (a negative position, `"position": "here"`, `params: null`,
a lone surrogate, a missing field). Requests must be answered once, with a result or a
-32602/-32600 error, never -32603 and never a traceback; notifications must never be
answered, and the server must keep serving."""

from __future__ import annotations

import json

import pytest
from lsprotocol import types as lsp

from lsp_server.server.server import create_server
from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.lsp_examples import URI, example_params, mutations
from tests.wire_client import WireClient, frame

# exit ends the process and shutdown (whatever its params) ends serving: tested on their
# own below; a valid initialized would reload the models.
NEVER_SENT = {lsp.EXIT, lsp.SHUTDOWN}
ONLY_INVALID = {lsp.INITIALIZED}


def registered_methods() -> tuple[list[str], list[str]]:
    """(requests, notifications) the server handles, as pygls registered them."""
    fm = create_server(lambda *_: None).protocol.fm
    names = set(fm.features) | set(fm.builtin_features) | {lsp.CANCEL_REQUEST}
    requests, notifications = [], []
    for name in sorted(names - NEVER_SENT):
        types = lsp.METHOD_TO_TYPES.get(name)
        if types is None:
            requests.append(name)  # specfill's own methods are requests
        elif "notebook" not in name:  # notebooks: not advertised, pygls' own bookkeeping
            (requests if types[1] is not None or "Request" in types[0].__name__
             else notifications).append(name)
    return requests, notifications


REQUESTS, NOTIFICATIONS = registered_methods()


@pytest.fixture(scope="module")
def wire(tiny_pair_dirs):
    client = WireClient()
    client.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=4))
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "python", "version": 1, "text": PY_SOURCE}})
    yield client
    client.close()


def test_the_registered_methods_include_the_ones_clients_use():
    assert {lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.INITIALIZE, "specfill/stats"} <= set(REQUESTS)
    assert {lsp.TEXT_DOCUMENT_DID_CHANGE, lsp.TEXT_DOCUMENT_DID_OPEN} <= set(NOTIFICATIONS)


def _probe(wire: WireClient, tag: str) -> None:
    assert "result" in wire.call(f"probe-{tag}", "specfill/stats")


@pytest.mark.parametrize("method", REQUESTS)
def test_every_mutated_request_gets_exactly_one_answer(wire: WireClient, method: str):
    base = example_params(method) if method in lsp.METHOD_TO_TYPES else None
    sent = []
    for n, (path, params) in enumerate(mutations(base)):
        msg_id = f"{method}#{n}"
        wire.send({"id": msg_id, "method": method, "params": params})
        sent.append((msg_id, path))
    for msg_id, path in sent:
        response = wire.wait_response(msg_id)
        error = response.get("error")
        if error is not None:
            assert error["code"] in (-32602, -32600, -32601, -32800), (path, error)
            assert "traceback" not in json.dumps(error), path
            assert len(error["message"]) < 600, path
        else:
            assert "result" in response, path
    assert all(wire.responses[json.dumps(msg_id)] == 1 for msg_id, _ in sent)
    _probe(wire, method)


@pytest.mark.parametrize("method", NOTIFICATIONS)
def test_mutated_notifications_are_never_answered_and_never_pop_up(wire: WireClient, method: str):
    before = len(wire.messages)
    for _, params in mutations(example_params(method)):
        if method in ONLY_INVALID and params in (None, {}):
            continue
        wire.send({"method": method, "params": params})
    _probe(wire, method)
    new = wire.messages[before:]
    assert [m for m in new if "id" in m and "method" not in m] == [
        m for m in new if m.get("id") == f"probe-{method}"]
    popups = [m["params"]["message"] for m in new if m.get("method") == "window/showMessage"]
    assert not any("Error in server" in p or "internal error" in p for p in popups), popups


def test_the_issue_s_examples_get_minus_32602(wire: WireClient):
    position = {"textDocument": {"uri": URI}, "context": {"triggerKind": 1}}
    cases = {
        "line": {**position, "position": {"line": -1, "character": 0}},
        "character": {**position, "position": {"line": 0, "character": -5}},
        "here": {**position, "position": "here"},
        "null": None,
    }
    for name, params in cases.items():
        wire.send({"id": f"issue-{name}", "method": "textDocument/inlineCompletion", "params": params})
    for name in cases:
        error = wire.wait_response(f"issue-{name}")["error"]
        assert error["code"] == -32602
        assert error["message"].startswith("Invalid params for textDocument/inlineCompletion")
    assert "position" in wire.by_id['"issue-line"']["error"]["message"]


def test_envelope_errors_get_minus_32700_and_minus_32600(wire: WireClient):
    errors_before = len([m for m in wire.messages if "id" in m and m["id"] is None])
    wire.write(frame(b"{not json"))
    wire.write(frame(b"[1, 2]"))
    wire.write(frame(b"42"))
    wire.write(frame(b'{"jsonrpc": "2.0", "id": [1], "method": "specfill/stats"}'))
    wire.write(frame(b'{"jsonrpc": "1.0", "id": "old", "method": "specfill/stats"}'))
    wire.write(frame(b'{"jsonrpc": "2.0", "id": "nomethod"}'))
    wire.write(frame(b'{"jsonrpc": "2.0", "id": "num-method", "method": 7}'))
    wire.write(frame(b"\xff\xfe not utf-8"))
    assert wire.wait_response("old")["error"]["code"] == -32600
    assert wire.wait_response("num-method")["error"]["code"] == -32600
    assert wire.wait_response("nomethod")["error"]["code"] == -32600
    _probe(wire, "envelope")
    null_id = [m["error"]["code"] for m in wire.messages if "id" in m and m["id"] is None]
    assert sorted(null_id[errors_before:]) == sorted([-32700, -32600, -32600, -32600, -32700])


def test_positions_past_the_end_are_clamped_and_answered(wire: WireClient):
    params = {"textDocument": {"uri": URI}, "context": {"triggerKind": 1},
              "position": {"line": 10**6, "character": 10**6}}
    response = wire.call("far", "textDocument/inlineCompletion", params)
    assert "result" in response and "items" in response["result"]


class _Capture:
    def __init__(self):
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        pass


def test_a_handler_exception_is_minus_32603_without_traceback_or_the_exception_text():
    server = create_server(lambda *_: None)

    @server.feature("specfill/boom")
    def boom(ls, params):
        raise KeyError("def secret_source_line(): pass")

    out = _Capture()
    server.protocol.set_writer(out, include_headers=False)
    server.protocol.handle_message({"jsonrpc": "2.0", "id": 9, "method": "specfill/boom"})
    response = json.loads(out.sent[-1])
    assert response["id"] == 9 and response["error"]["code"] == -32603
    assert "KeyError" in response["error"]["message"]
    assert "secret" not in json.dumps(response) and "traceback" not in json.dumps(response)


def test_after_shutdown_requests_get_minus_32600_and_exit_ends_the_process():
    client = WireClient()
    try:
        client.call("init", "initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert client.call("down", "shutdown", [1, 2])["result"] is None  # params ignored
        late = client.call("late", "specfill/stats")
        assert late["error"]["code"] == -32600
        client.notify("exit")
        assert client.proc.wait(10) == 0
        assert all(n == 1 for n in client.responses.values())
    finally:
        client.close()


def test_documents_and_requests_before_initialize_are_handled_not_errors():
    client = WireClient()
    try:
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": "x = 1\n"}})
        client.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2},
                                                 "contentChanges": [{"text": "y = 2\n"}]})
        early = client.call("early", "textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 0, "character": 0},
            "context": {"triggerKind": 1}})
        assert early["result"] == {"items": []}  # no engine yet: nothing to offer, no error
        state = client.call("doc", "specfill/document", {"uri": URI})["result"]
        assert state["version"] == 2 and state["inSync"]
        assert client.notifications("window/showMessage") == []
    finally:
        client.close()
