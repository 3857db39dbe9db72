"""Plain JSON-RPC over stdio, as a minimal client writes it (no pytest-lsp smoothing)."""

from __future__ import annotations

import json
import subprocess

from tests.e2e.conftest import SERVER


class RawClient:
    def __init__(self):
        self.proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def receive(self) -> dict:
        length = 0
        while line := self.proc.stdout.readline().strip():
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return json.loads(self.proc.stdout.read(length))

    def response(self, msg_id: int) -> tuple[dict, list[dict]]:
        others = []
        while (message := self.receive()).get("id") != msg_id:
            others.append(message)
        return message, others

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_a_request_without_params_and_empty_array_options_are_accepted():
    client = RawClient()
    try:
        # Neovim encodes an empty Lua table as [], and JSON-RPC allows omitting params.
        client.send({"id": 1, "method": "initialize",
                     "params": {"capabilities": {}, "initializationOptions": []}})
        init, notes = client.response(1)
        assert "inlineCompletionProvider" in init["result"]["capabilities"]
        assert not any(n.get("method") == "window/showMessage" for n in notes)
        client.send({"id": 2, "method": "specfill/stats"})
        stats, _ = client.response(2)
        assert stats["result"]["totals"]["requests"] == 0
        client.send({"id": 3, "method": "shutdown"})
        assert client.response(3)[0]["result"] is None
    finally:
        client.close()
