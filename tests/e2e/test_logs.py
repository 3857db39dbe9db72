"""What the server writes to its log (the editor's output panel): never the user's code or
the completions at the default level; everything with --log-level debug; --log-file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import tiny_options
from tests.wire_client import WireClient

URI = "file:///work/secret.py"
# Lines no log line would contain by chance.
SECRET = '''import zebra_quux_module


def frobnicate_the_widget(alpha_parameter, beta_parameter):
    hidden_total = alpha_parameter * 31337 + beta_parameter
    return hidden_total


class UnusualContainerName:
    def __init__(self, payload_value):
        self.payload_value = payload_value
        
'''


def session(tiny_pair_dirs, args: list[str], stderr: Path) -> list[str]:
    """Open, edit and complete a document; returns the completion texts."""
    client = WireClient(args, stderr_path=stderr)
    try:
        client.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=24))
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": SECRET}})
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [{"range": {"start": {"line": 11, "character": 8},
                                          "end": {"line": 11, "character": 8}},
                                "text": "self.secret_attr"}]})
        texts = []
        for n, (line, character) in enumerate([(11, 24), (4, 4), (5, 10)]):
            result = client.call(f"c{n}", "textDocument/inlineCompletion", {
                "textDocument": {"uri": URI}, "position": {"line": line, "character": character},
                "context": {"triggerKind": 1}})["result"]
            texts += [item["insertText"] for item in result["items"]]
        # a bad request and a bad notification carrying the text must not echo it either
        client.call("bad", "textDocument/inlineCompletion", {"text": SECRET, "position": -1})
        client.notify("textDocument/didOpen", {"textDocument": {"text": SECRET, "uri": 5}})
        client.call("probe", "specfill/stats")
    finally:
        client.close()
    return texts


def leaked(log: str, texts: list[str]) -> list[str]:
    pieces = [line.strip() for line in SECRET.splitlines() if len(line.strip()) >= 8]
    pieces += ["secret_attr"] + [t.strip() for t in texts if len(t.strip()) >= 8]
    return [p for p in pieces if p in log]


def test_the_default_log_holds_no_document_text_and_no_completion(tiny_pair_dirs, tmp_path):
    stderr = tmp_path / "stderr.log"
    texts = session(tiny_pair_dirs, [], stderr)
    log = stderr.read_text()
    assert "completion " in log and "prompt tokens" in log  # the log does say what happened
    assert "answered -32602" in log
    assert leaked(log, texts) == []


def test_debug_logs_the_traffic_and_log_file_takes_it_off_stderr(tiny_pair_dirs, tmp_path):
    stderr, log_file = tmp_path / "stderr.log", tmp_path / "server.log"
    texts = session(tiny_pair_dirs, ["--log-level", "debug", "--log-file", str(log_file)], stderr)
    log = log_file.read_text()
    assert "Sending data" in log
    # so the default-level check above can fail: debug shows the cursor line and the answers
    assert leaked(log, texts) and "secret_attr" in log
    assert "Sending data" not in stderr.read_text() and "completion " not in stderr.read_text()
