"""Protocol mistakes a real client makes, over stdio: a didChange for a document that was
never opened, edits that do not fit the text (out of sync until a full text), a flood of
the same mistake (one popup a minute)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.wire_client import WireClient

URI = "file:///work/mistakes.py"


@pytest.fixture(scope="module")
def wire(tiny_pair_dirs, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "stderr.log"
    client = WireClient(stderr_path=log)
    client.log_path = log
    client.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=8))
    yield client
    client.close()


def open_doc(wire: WireClient, text: str = PY_SOURCE, version: int = 1) -> None:
    wire.notify("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "python", "version": version, "text": text}})


def change(wire: WireClient, version: int, *changes: dict, uri: str = URI) -> None:
    wire.notify("textDocument/didChange", {
        "textDocument": {"uri": uri, "version": version}, "contentChanges": list(changes)})


def edit(start: tuple[int, int], end: tuple[int, int], text: str) -> dict:
    return {"range": {"start": {"line": start[0], "character": start[1]},
                      "end": {"line": end[0], "character": end[1]}}, "text": text}


def complete(wire: WireClient, msg_id: str, line: int, character: int) -> list:
    response = wire.call(msg_id, "textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 1}})
    return response["result"]["items"]


def popups(wire: WireClient) -> list[str]:
    return [m["params"]["message"] for m in wire.notifications("window/showMessage")]


def test_did_change_for_an_unopened_document_is_one_log_line_not_a_popup(wire):
    for n in range(5):
        change(wire, n + 2, edit((0, 0), (0, 0), "x"), uri="file:///work/never-opened.py")
    wire.call("probe", "specfill/stats")
    assert popups(wire) == []
    assert wire.log_path.read_text().count("never-opened.py, which is not open") == 1


def test_a_document_over_the_size_limit_gets_no_completions_and_one_log_line(wire):
    wire.notify("workspace/didChangeConfiguration", {"settings": {"maxDocumentMB": 0.001}})
    big = "x = 1\n" * 400  # 2,400 bytes > 1,048
    wire.notify("textDocument/didOpen", {"textDocument": {
        "uri": "file:///work/big.py", "languageId": "python", "version": 1, "text": big}})
    response = wire.call("big", "textDocument/inlineCompletion", {
        "textDocument": {"uri": "file:///work/big.py"}, "position": {"line": 3, "character": 0},
        "context": {"triggerKind": 1}})
    assert response["result"]["items"] == []
    wire.notify("workspace/didChangeConfiguration", {"settings": {"maxDocumentMB": 8.0}})
    wire.call("probe-big", "specfill/stats")
    assert wire.log_path.read_text().count("big.py: it is larger than the limit") == 1
    assert popups(wire) == []


def test_an_edit_outside_the_text_stops_completions_until_a_full_text(wire):
    open_doc(wire)
    assert complete(wire, "before", 11, 8)
    change(wire, 2, edit((40, 0), (40, 3), "x"))  # the file has 13 lines
    change(wire, 3, edit((0, 0), (0, 0), "y"))  # ignored: there is no text to apply it to
    assert complete(wire, "desynced", 11, 8) == []
    change(wire, 4, {"text": PY_SOURCE})
    assert complete(wire, "resynced", 11, 8)
    log = wire.log_path.read_text()
    assert log.count("out of sync") == 1
    assert not any("out of sync" in t for t in popups(wire))


def test_a_reversed_range_desyncs_and_didopen_brings_it_back(wire):
    open_doc(wire, version=10)
    change(wire, 11, edit((5, 10), (5, 2), "z"))
    assert complete(wire, "reversed", 11, 8) == []
    open_doc(wire, version=12)
    assert complete(wire, "reopened", 11, 8)


def test_a_thread_count_change_takes_effect_without_a_reload(wire):
    open_doc(wire, version=20)
    wire.notify("workspace/didChangeConfiguration", {"settings": {"specfill": {"model": {"threads": 2}}}})
    complete(wire, "threads", 11, 8)
    engine = wire.call("threads-stats", "specfill/stats")["result"]["engine"]
    assert engine["threads"] == 2 and engine["ready"]
    assert not any("reloading" in t for t in popups(wire))
