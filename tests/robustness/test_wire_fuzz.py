"""Framing and JSON-RPC fuzz: >= 10,000 messages (valid, mutated params of every
registered method, malformed JSON, broken framing) over stdio, then a valid completion is
still answered. Every request id is answered exactly as often as it should be: once when
its frame arrived whole, never when the frame itself was broken."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

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
# A fuzzed message: its bytes, its kind, and how many responses its id must get (None: no id).
Message = tuple[bytes, str, int | None]


def mutated_pool() -> list[tuple[str, object]]:
    pool = []
    for method in REQUESTS + NOTIFICATIONS:
        base = example_params(method) if method in lsp.METHOD_TO_TYPES else None
        for _, params in mutations(base):
            if method in ONLY_INVALID and params in (None, {}):
                continue
            pool.append((method, params))
    return pool


@dataclass
class Sent:
    """What the fuzz wrote: every frame in order, and what each id must get back."""
    frames: list[bytes] = field(default_factory=list)
    expected: dict[str, int] = field(default_factory=dict)  # id (JSON text) -> responses due
    kinds: dict[str, int] = field(default_factory=dict)


def stats_request(msg_id: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "specfill/stats"}).encode()


def mutated_message(rng: random.Random, pool: list, msg_id: str) -> Message:
    """A registered method with mutated params: a request is answered once, a notification never."""
    method, params = rng.choice(pool)
    body = {"jsonrpc": "2.0", "method": method, "params": params}
    if method not in REQUESTS:
        return frame(json.dumps(body).encode()), "mutated", None
    body["id"] = msg_id
    return frame(json.dumps(body).encode()), "mutated", 1


def broken_frame(rng: random.Random, msg_id: str, table: dict) -> Message:
    """A valid request in a broken frame: its id must never be answered."""
    name = rng.choice(sorted(table))
    return table[name](stats_request(msg_id)) + b"\r\n", f"framing: {name}", 0


def fuzzed_message(rng: random.Random, pool: list, msg_id: str) -> Message:
    """One message of the mix, drawn by the roll's share for each kind."""
    roll = rng.random()
    if roll < 0.55:
        return mutated_message(rng, pool, msg_id)
    if roll < 0.70:  # valid and cheap
        return frame(stats_request(msg_id)), "valid", 1
    if roll < 0.80:
        return frame(rng.choice(MALFORMED)), "malformed JSON", None
    return broken_frame(rng, msg_id, LOST if roll < 0.90 else GARBLED)


def send_fuzz(wire: WireClient, rng: random.Random, pool: list) -> Sent:
    sent = Sent()
    for n in range(MESSAGES):
        msg_id = f"f{n}"
        data, kind, want = fuzzed_message(rng, pool, msg_id)
        if want is not None:
            sent.expected[json.dumps(msg_id)] = want
        kind = kind.split(":")[0]
        sent.kinds[kind] = sent.kinds.get(kind, 0) + 1
        sent.frames.append(data)
        wire.write(data)
    return sent


def open_document(wire: WireClient, version: int) -> None:
    wire.notify("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "python", "version": version, "text": PY_SOURCE}})


@contextmanager
def server_with_document_open(tiny_pair_dirs) -> Iterator[WireClient]:
    wire = WireClient()
    try:
        wire.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=2))
        open_document(wire, version=1)
        yield wire
    finally:
        wire.close()


def assert_a_completion_is_answered_after_reopening(wire: WireClient) -> None:
    open_document(wire, version=2)
    final = wire.call("final", "textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": 11, "character": 8},
        "context": {"triggerKind": 1}}, timeout_s=60)
    assert "items" in final["result"]


def assert_each_id_answered_as_its_frame_allows(wire: WireClient, sent: Sent) -> None:
    """Once when its frame arrived whole, never when the frame itself was broken; no id twice."""
    wrong = {k: (wire.responses[k], want) for k, want in sent.expected.items()
             if wire.responses[k] != want}
    assert wrong == {}, [(k, sent.frames[int(json.loads(k)[1:])][-300:]) for k in list(wrong)[:4]]
    assert all(count == 1 for key, count in wire.responses.items() if key != "null")


def assert_malformed_json_answered_with_a_null_id(wire: WireClient, sent: Sent) -> None:
    assert wire.responses["null"] >= sent.kinds["malformed JSON"]  # each answered -32700/-32600


def assert_server_alive_without_leaks_or_error_popups(wire: WireClient, stats: dict) -> None:
    assert wire.proc.poll() is None
    assert stats["tables"]["pygls_request_futures"] <= 1
    popups = [m["params"]["message"] for m in wire.notifications("window/showMessage")]
    assert not any("Error in server" in p for p in popups), popups[:3]


def record_figures(figures: dict, wire: WireClient, sent: Sent, elapsed: float) -> None:
    figures["wire fuzz: messages sent"] = MESSAGES
    figures["wire fuzz: by kind"] = sent.kinds
    figures["wire fuzz: requests answered exactly once"] = sum(1 for v in sent.expected.values() if v)
    figures["wire fuzz: null-id errors (parse / invalid request)"] = wire.responses[json.dumps(None)]
    figures["wire fuzz: seconds"] = round(elapsed, 1)


def test_ten_thousand_fuzzed_messages_then_a_completion_is_still_answered(tiny_pair_dirs, figures):
    rng, pool = random.Random(1818), mutated_pool()
    t0 = time.monotonic()
    with server_with_document_open(tiny_pair_dirs) as wire:
        sent = send_fuzz(wire, rng, pool)
        assert_a_completion_is_answered_after_reopening(wire)
        stats = wire.call("final-stats", "specfill/stats")["result"]
        elapsed = time.monotonic() - t0
        assert_each_id_answered_as_its_frame_allows(wire, sent)
        assert_malformed_json_answered_with_a_null_id(wire, sent)
        assert_server_alive_without_leaks_or_error_popups(wire, stats)
    record_figures(figures, wire, sent, elapsed)
