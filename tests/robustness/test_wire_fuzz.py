"""Framing and JSON-RPC fuzz: >= 10,000 messages (valid, mutated params of every
registered method, malformed JSON, broken framing) over stdio, then a valid completion is
still answered. Every request id is answered exactly as often as it should be: once when
its frame arrived whole, never when the frame itself was broken."""

from __future__ import annotations

import json
import random
import time

from lsprotocol import types as lsp

from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.e2e.test_invalid_messages import NOTIFICATIONS, ONLY_INVALID, REQUESTS
from tests.lsp_examples import example_params, mutations
from tests.wire_client import WireClient, frame

MESSAGES = 10_000
URI = "file:///work/wire.py"
# Broken frames that lose the message (each followed by CRLF so the next frame is found).
LOST = {
    "lowercase header": lambda body: b"content-length: %d\r\n\r\n" % len(body) + body,
    "no header": lambda body: body,
    "non-numeric length": lambda body: b"Content-Length: many\r\n\r\n" + body,
    "negative length": lambda body: b"Content-Length: -%d\r\n\r\n" % len(body) + body,
    "zero length": lambda body: b"Content-Length: 0\r\n\r\n" + body,
}
# Frames whose body arrives wrong: answered -32700 with a null id.
GARBLED = {
    "length short by 2": lambda body: b"Content-Length: %d\r\n\r\n" % (len(body) - 2) + body,
    "length long by 3": lambda body: b"Content-Length: %d\r\n\r\n" % (len(body) + 3) + body + b"~~~",
}
MALFORMED = [b"{", b"{\"jsonrpc\": \"2.0\", \"id\": 1,", b"\xff\xfe\x00", b"[" * 5000 + b"]" * 5000,
             b"nul\x00l", b"{\"a\": NaN", b"\"just a string\"", b"[]", b"{}", b"null", b"1e999"]


def mutated_pool() -> list[tuple[str, object]]:
    pool = []
    for method in REQUESTS + NOTIFICATIONS:
        base = example_params(method) if method in lsp.METHOD_TO_TYPES else None
        for _, params in mutations(base):
            if method in ONLY_INVALID and params in (None, {}):
                continue
            pool.append((method, params))
    return pool


def test_ten_thousand_fuzzed_messages_then_a_completion_is_still_answered(tiny_pair_dirs, figures):
    rng = random.Random(1818)
    pool = mutated_pool()
    wire = WireClient()
    expected: dict[str, int] = {}  # id (JSON text) -> responses it must get
    kinds: dict[str, int] = {}
    sent_log: list[bytes] = []
    t0 = time.monotonic()
    try:
        wire.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=2))
        wire.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": PY_SOURCE}})
        for n in range(MESSAGES):
            roll = rng.random()
            msg_id = f"f{n}"
            if roll < 0.55:  # a mutated message of a registered method
                method, params = rng.choice(pool)
                is_request = method in REQUESTS
                body = {"jsonrpc": "2.0", "method": method, "params": params}
                if is_request:
                    body["id"] = msg_id
                data, kind = frame(json.dumps(body).encode()), "mutated"
                if is_request:
                    expected[json.dumps(msg_id)] = 1
            elif roll < 0.70:  # valid and cheap
                data, kind = frame(json.dumps({"jsonrpc": "2.0", "id": msg_id,
                                               "method": "specfill/stats"}).encode()), "valid"
                expected[json.dumps(msg_id)] = 1
            elif roll < 0.80:
                data, kind = frame(rng.choice(MALFORMED)), "malformed JSON"
            else:
                body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "specfill/stats"}).encode()
                table = LOST if roll < 0.90 else GARBLED
                name = rng.choice(sorted(table))
                data, kind = table[name](body) + b"\r\n", f"framing: {name}"
                expected[json.dumps(msg_id)] = 0
            kinds[kind.split(":")[0]] = kinds.get(kind.split(":")[0], 0) + 1
            sent_log.append(data)
            wire.write(data)
        wire.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 2, "text": PY_SOURCE}})
        final = wire.call("final", "textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 11, "character": 8},
            "context": {"triggerKind": 1}}, timeout_s=60)
        assert "items" in final["result"]
        stats = wire.call("final-stats", "specfill/stats")["result"]
        elapsed = time.monotonic() - t0
        wrong = {k: (wire.responses[k], want) for k, want in expected.items()
                 if wire.responses[k] != want}
        assert wrong == {}, [(k, sent_log[int(json.loads(k)[1:])][-300:]) for k in list(wrong)[:4]]
        assert all(count == 1 for key, count in wire.responses.items() if key != "null")
        assert wire.responses["null"] >= kinds["malformed JSON"]  # each answered -32700/-32600
        assert wire.proc.poll() is None
        assert stats["tables"]["pygls_request_futures"] <= 1
        popups = [m["params"]["message"] for m in wire.notifications("window/showMessage")]
        assert not any("Error in server" in p for p in popups), popups[:3]
    finally:
        wire.close()
    figures["wire fuzz: messages sent"] = MESSAGES
    figures["wire fuzz: by kind"] = kinds
    figures["wire fuzz: requests answered exactly once"] = sum(1 for v in expected.values() if v)
    figures["wire fuzz: null-id errors (parse / invalid request)"] = wire.responses[json.dumps(None)]
    figures["wire fuzz: seconds"] = round(elapsed, 1)
