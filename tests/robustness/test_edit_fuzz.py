"""10,000 random incremental edits (emoji, CJK, NUL, CRLF and lone CR, ranges at and past
the ends) over stdio: the server's text equals the client's at every checkpoint, or the
server says it is out of sync (for the ranges that cannot fit) until a full text; and the
server's log, at the default level, holds no line of the document."""

from __future__ import annotations

import random
import time

from tests.e2e.conftest import tiny_options
from tests.robustness import textmodel as tm
from tests.wire_client import WireClient

URI = "file:///work/fuzzed.py"
START = "import os\r\n\r\ndef f(\u4e2d):\n    return '\U0001F600'\rclass C:\n    pass\n"
EDITS = 10_000
CHECK_EVERY = 200


def state(wire: WireClient, tag: str) -> dict:
    return wire.call(tag, "specfill/document", {"uri": URI})["result"]


def test_ten_thousand_random_edits_keep_both_sides_equal_or_marked(tiny_pair_dirs, tmp_path, figures):
    rng = random.Random(18)
    log = tmp_path / "stderr.log"
    wire = WireClient(stderr_path=log)
    t0 = time.monotonic()
    desyncs = checks = sent = 0
    try:
        wire.initialize(tiny_options(*tiny_pair_dirs, maxNewTokens=4))
        text, version = START, 1
        wire.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": version, "text": text}})
        seen_lines: set[str] = set()
        while sent < EDITS:
            version += 1
            if rng.random() < 0.02 and (bad := tm.invalid_edit(rng, text)) is not None:
                wire.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": version},
                                                        "contentChanges": [tm.change(*bad, "Z")]})
                sent += 1
                s = state(wire, f"bad-{sent}")
                assert not s["inSync"] and s["problem"].startswith("out of sync"), (bad, s)
                desyncs += 1
                version += 1
                wire.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": version},
                                                        "contentChanges": [{"text": text}]})
                assert state(wire, f"resync-{sent}")["sha256"] == tm.sha256(text)
                continue
            changes = []
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                a, b = tm.order(tm.random_position(rng, text), tm.random_position(rng, text))
                if len(text) < 3000 and rng.random() < 0.6:
                    b = a  # mostly typing; deletions keep the document small
                new = tm.random_insert(rng) if len(text) < 3000 else ""
                text = tm.apply(text, a, b, new)
                changes.append(tm.change(a, b, new))
                sent += 1
            wire.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": version},
                                                    "contentChanges": changes})
            seen_lines.update(line.strip() for line in tm.EOL.split(text) if len(line.strip()) >= 16)
            if sent // CHECK_EVERY > checks:
                checks += 1
                s = state(wire, f"check-{checks}")
                assert s["inSync"] and s["sha256"] == tm.sha256(text), f"diverged after {sent} edits"
        final = state(wire, "final")
        assert final["inSync"] and final["sha256"] == tm.sha256(text) and final["version"] == version
        assert "result" in wire.call("complete", "textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 0, "character": 0},
            "context": {"triggerKind": 1}})
    finally:
        wire.close()
    elapsed = time.monotonic() - t0
    server_log = log.read_text(errors="replace")
    leaked = [line for line in seen_lines if line in server_log]
    assert leaked == [], leaked[:3]
    assert server_log.count("out of sync") == desyncs  # one line per desync
    figures["edit fuzz: incremental edits"] = sent
    figures["edit fuzz: checkpoints equal (sha256)"] = checks + 1
    figures["edit fuzz: out-of-sync ranges caught"] = desyncs
    figures["edit fuzz: seconds"] = round(elapsed, 1)
    figures["log check: document lines found in the default log"] = f"0 of {len(seen_lines)}"
