"""A workspace of 200 tabs opened at once, with the package head on (other files' outlines
in front of every prompt, warmed at each didOpen): each didOpen's warm supersedes the one
before, so warms stay bounded and preempted; a completion asked right after is answered,
in the newest tab and in the oldest; the server's memory does not grow with the tabs."""

from __future__ import annotations

import time

from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.wire_client import WireClient

TABS = 200


def tab_text(n: int) -> str:
    return f"def helper_{n}(value):\n    return value * {n}\n\n\n" + PY_SOURCE


def completion(wire: WireClient, msg_id: str, uri: str) -> dict:
    return wire.call(msg_id, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": 15, "character": 8},
        "context": {"triggerKind": 1}}, timeout_s=60)


def test_two_hundred_tabs_opened_at_once_keep_warms_bounded_and_requests_answered(
        tiny_pair_dirs, figures):
    options = tiny_options(*tiny_pair_dirs, maxNewTokens=6,
                           contextWindow={"extraTokens": 512, "extraSources": "package"})
    wire = WireClient()
    try:
        wire.initialize(options)
        uris = [f"file:///work/tabs/module_{n:03d}.py" for n in range(TABS)]
        before = wire.call("s0", "specfill/stats")["result"]
        t0 = time.monotonic()
        for n, uri in enumerate(uris):
            wire.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": tab_text(n)}})
        newest = completion(wire, "newest", uris[-1])
        answered_s = time.monotonic() - t0
        oldest = completion(wire, "oldest", uris[0])
        assert "result" in newest and "result" in oldest, (newest, oldest)
        deadline = time.monotonic() + 60
        while not (stats := wire.call(f"idle-{time.monotonic()}", "specfill/stats")["result"])["engine"]["idle"]:
            assert time.monotonic() < deadline, stats["warms"]
            time.sleep(0.05)
        warms = stats["warms"]
        ran = warms["warm"] + warms["aborted"] + warms["error"]
        assert warms["error"] == 0
        # One warm a didOpen at most, each superseding the one before: none waits in a queue.
        assert ran <= TABS and stats["tables"]["worker_active_jobs"] == 0
        grown_mb = (stats["rss_bytes"] - before["rss_bytes"]) / 1e6
        assert grown_mb < 300, grown_mb
    finally:
        wire.close()
    figures["200 tabs: first completion answered after opening them, s"] = round(answered_s, 2)
    figures["200 tabs: warms run / done"] = f"{ran} / {warms['warm']}"
    figures["200 tabs: server RSS growth, MB"] = round(grown_mb, 1)
