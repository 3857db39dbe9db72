"""The real server object, driven through its protocol (as the stdio loop does), over an
engine whose kernel raises: every request is answered at once, the worker is restarted a
bounded number of times with one message each, then the server gives up and says so."""

from __future__ import annotations

import asyncio
import json

from lsp_server.server.server import RestartBudget
from lsp_server.server.server import create_server
from tests.unit.test_completion_streams import SOURCE, ScriptedEngine


class Capture:
    def __init__(self):
        self.messages: list[dict] = []

    def write(self, data: bytes) -> None:
        self.messages.append(json.loads(data))

    def close(self) -> None:
        pass


async def answer(out: Capture, msg_id, timeout_s: float = 5.0) -> dict:
    for _ in range(int(timeout_s / 0.01)):
        found = [m for m in out.messages if m.get("id") == msg_id and "method" not in m]
        if found:
            assert len(found) == 1
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no answer to {msg_id}")


async def test_a_failing_engine_is_restarted_three_times_then_given_up_on():
    loads = []

    def factory(config, progress):
        loads.append(config)
        return ScriptedEngine(steps=50, fail_after=1)  # every generation raises

    server = create_server(factory)
    out = Capture()
    server.protocol.set_writer(out, include_headers=False)
    handle = server.protocol.handle_message
    handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"processId": None, "capabilities": {}}})
    handle({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    handle({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///a.py", "languageId": "python", "version": 1, "text": SOURCE}}})
    for n in range(1, 7):
        handle({"jsonrpc": "2.0", "id": n, "method": "textDocument/inlineCompletion", "params": {
            "textDocument": {"uri": "file:///a.py"}, "position": {"line": 5, "character": 4},
            "context": {"triggerKind": 1}}})
        assert (await answer(out, n))["result"] == {"items": []}
    popups = [m["params"]["message"] for m in out.messages if m.get("method") == "window/showMessage"]
    assert [p for p in popups if "restarting it" in p] == [
        f"specfill: the engine failed (RuntimeError: kernel exploded); restarting it ({i} of 3)."
        for i in (1, 2, 3)]
    assert sum("completions are off" in p for p in popups) == 1
    assert len(loads) == 4  # the first worker and three restarts
    server.worker.stop()


def test_the_restart_budget_refills_after_its_window():
    now = [0.0]
    budget = RestartBudget(max_restarts=2, window_s=60, clock=lambda: now[0])
    assert budget.allow() and budget.allow() and not budget.allow()
    now[0] = 61.0
    assert budget.allow() and budget.used == 1
