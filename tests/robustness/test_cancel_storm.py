"""A cancel storm: 1,000 completion requests over stdio at a handful of positions (so
they supersede and join each other), half of them cancelled at random moments. Every
request is answered exactly once, the engine goes idle, the stats add up and the
per-request tables are empty again."""

from __future__ import annotations

import json
import random
import time

from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.wire_client import WireClient

REQUESTS = 1_000
URIS = ["file:///work/storm-a.py", "file:///work/storm-b.py"]
SPOTS = [(11, 8), (5, 18), (4, 4)]


def test_a_thousand_requests_half_cancelled_each_answered_once(tiny_pair_dirs, figures):
    rng = random.Random(7)
    wire = WireClient()
    t0 = time.monotonic()
    cancelled = 0
    try:
        wire.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=6))
        for uri in URIS:
            wire.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": PY_SOURCE}})
        to_cancel: list[str] = []
        for n in range(REQUESTS):
            line, character = rng.choice(SPOTS)
            wire.request(f"s{n}", "textDocument/inlineCompletion", {
                "textDocument": {"uri": rng.choice(URIS)},
                "position": {"line": line, "character": character}, "context": {"triggerKind": 1}})
            if rng.random() < 0.5:
                to_cancel.append(f"s{n}")
            while to_cancel and rng.random() < 0.6:  # cancels land a little later, in bursts
                wire.notify("$/cancelRequest", {"id": to_cancel.pop(rng.randrange(len(to_cancel)))})
                cancelled += 1
            if rng.random() < 0.05:
                time.sleep(0.01)
        for msg_id in to_cancel:
            wire.notify("$/cancelRequest", {"id": msg_id})
            cancelled += 1
        outcomes = {"result": 0, "cancelled (-32800)": 0, "other error": 0}
        for n in range(REQUESTS):
            response = wire.wait_response(f"s{n}", timeout_s=120)
            if "result" in response:
                outcomes["result"] += 1
            elif response["error"]["code"] == -32800:
                outcomes["cancelled (-32800)"] += 1
            else:
                outcomes["other error"] += 1
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 20
        while True:
            stats = wire.call(f"idle-{time.monotonic()}", "specfill/stats")["result"]
            if stats["engine"]["idle"] and stats["tables"]["inflight_generations"] == 0:
                break
            assert time.monotonic() < deadline, stats["tables"]
            time.sleep(0.05)
        t = stats["totals"]
        assert t["requests"] == t["completions"] + t["empty"] + t["cancelled"] + t["errors"]
        assert t["errors"] == 0 and outcomes["other error"] == 0
        assert stats["tables"]["pygls_request_futures"] <= 1  # the stats request itself
        assert stats["tables"]["worker_active_jobs"] == 0
        assert all(wire.responses[json.dumps(f"s{n}")] == 1 for n in range(REQUESTS))
    finally:
        wire.close()
    figures["cancel storm: requests"] = REQUESTS
    figures["cancel storm: $/cancelRequest sent"] = cancelled
    figures["cancel storm: outcomes"] = outcomes
    figures["cancel storm: engine generations"] = t["requests"]
    figures["cancel storm: seconds"] = round(elapsed, 1)
