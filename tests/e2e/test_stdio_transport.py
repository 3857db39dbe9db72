"""The stdio transport (lsp_server/server/stdio.py) on a real server process: messages framed
however the pipe delivers them, hostile framing, the end of stdin, exit, and a regular file
as stdin (pygls' own reader)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.wire_client import SERVER, WireClient, frame


def _body(msg_id, method, params=None) -> bytes:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


INIT = _body(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})


def test_a_message_split_across_writes_and_two_in_one_write_are_each_answered():
    client = WireClient()
    try:
        data = frame(INIT)
        for i in range(0, len(data), 7):  # the header and body in 7-byte pieces
            client.write(data[i:i + 7])
            time.sleep(0.002)
        assert "capabilities" in client.wait_response(1)["result"]
        client.write(frame(_body(2, "specfill/stats")) + frame(_body(3, "specfill/stats")))
        assert client.wait_response(2)["result"]["totals"]["requests"] == 0
        assert client.wait_response(3)["result"]["totals"]["requests"] == 0
    finally:
        assert client.close() == 0  # shutdown, then exit: exit code 0
    assert client.responses[json.dumps(2)] == 1


def test_an_overlong_header_line_is_dropped_and_the_next_message_answered():
    client = WireClient()
    try:
        client.write(b"X-Junk: " + b"x" * (3 << 20) + b"\r\n")
        client.write(frame(INIT))
        assert "capabilities" in client.wait_response(1, timeout_s=60)["result"]
    finally:
        assert client.close() == 0


def test_stdin_closing_mid_message_ends_the_server():
    client = WireClient()
    client.write(frame(INIT))
    client.wait_response(1)
    body = _body(2, "specfill/stats")
    client.write(b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
    client.proc.stdin.close()
    client.proc.wait(20)  # neither a hang on the missing bytes nor a crash loop
    assert 2 not in client.responses


def test_a_regular_file_as_stdin_is_read_by_pygls_own_reader(tmp_path):
    script = tmp_path / "session.lsp"
    script.write_bytes(frame(INIT) + frame(_body(2, "shutdown"))
                       + frame(json.dumps({"jsonrpc": "2.0", "method": "exit"}).encode()))
    with open(script, "rb") as stdin:
        done = subprocess.run(SERVER, stdin=stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b'"id":1' in done.stdout.replace(b" ", b"") and b'"id":2' in done.stdout.replace(b" ", b"")


def test_watchable_tells_a_pipe_from_a_file(tmp_path):
    from lsp_server.server.stdio import watchable

    with subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE) as proc:
        assert watchable(proc.stdout)
    path = tmp_path / "f"
    path.write_bytes(b"")
    with open(path, "rb") as f:
        assert not watchable(f)
