"""A raw LSP client for hostile-client tests: writes any bytes, reads every message the
server sends on a background thread, and counts the responses per id. No pygls on this
side, so nothing smooths over what the server really does on the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

SERVER = [sys.executable, "-m", "lsp_server", "serve", "--stdio"]


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class WireClient:
    def __init__(self, args: list[str] | None = None, stderr_path: Path | None = None):
        self._stderr = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            SERVER + (args or []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.messages: list[dict] = []
        self.responses: Counter = Counter()  # id (as JSON text) -> how many responses
        self.by_id: dict[str, dict] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- writing --------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.write(frame(json.dumps({"jsonrpc": "2.0", **message}).encode()))

    def request(self, msg_id: Any, method: str, params: Any = None, **extra) -> None:
        body = {"id": msg_id, "method": method, **extra}
        if params is not None:
            body["params"] = params
        self.send(body)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"method": method, **({} if params is None else {"params": params})})

    # -- reading --------------------------------------------------------------------

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = out.read(length or 0)
            message = json.loads(body)
            with self._cond:
                self.messages.append(message)
                if "id" in message and "method" not in message:
                    key = json.dumps(message["id"])
                    self.responses[key] += 1
                    self.by_id[key] = message
                self._cond.notify_all()

    def wait_response(self, msg_id: Any, timeout_s: float = 30.0) -> dict:
        key = json.dumps(msg_id)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while key not in self.by_id:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no response to id {msg_id!r} within {timeout_s} s")
                self._cond.wait(min(left, 0.5))
            return self.by_id[key]

    def call(self, msg_id: Any, method: str, params: Any = None, timeout_s: float = 30.0) -> dict:
        self.request(msg_id, method, params)
        return self.wait_response(msg_id, timeout_s)

    def notifications(self, method: str) -> list[dict]:
        with self._cond:
            return [m for m in self.messages if m.get("method") == method]

    def initialize(self, options: dict | None = None, ready_timeout_s: float = 120.0) -> dict:
        init = self.call("init", "initialize", {
            "processId": None, "rootUri": None, "capabilities": {},
            "initializationOptions": options or {}})
        self.notify("initialized", {})
        deadline = time.monotonic() + ready_timeout_s
        n = 0
        while options and time.monotonic() < deadline:  # wait for the models
            n += 1
            engine = self.call(f"ready-{n}", "specfill/stats")["result"]["engine"]
            if engine["ready"] or engine["load_error"]:
                break
            time.sleep(0.1)
        return init

    def close(self) -> int:
        try:
            if self.proc.poll() is None:
                self.call("bye", "shutdown", timeout_s=10)
                self.notify("exit")
                self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        finally:
            self._reader.join(5)
            if self._stderr is not subprocess.DEVNULL:
                self._stderr.close()
        return self.proc.returncode
