"""Soak: a long editing session over stdio (didChange after didChange, a completion every
few keystrokes) on tiny models; RSS growth after warm-up and the per-request tables.

    python -m tests.robustness.soak --changes 100000 --completions 10000

tests/robustness/test_soak.py runs the same session inside the suite."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tests.e2e.conftest import PY_SOURCE, tiny_options
from tests.wire_client import WireClient

URI = "file:///work/soak.py"
LINE = 11  # the half-typed line of PY_SOURCE, typed and erased over and over


def run_soak(target: str, draft: str, changes: int, completions: int, warmup: float = 0.2) -> dict:
    wire = WireClient()
    every = max(1, changes // max(1, completions))
    samples: list[tuple[int, int]] = []  # (changes so far, rss bytes)
    tables_max: dict[str, int] = {}
    t0 = time.monotonic()
    done = asked = 0
    try:
        wire.initialize(tiny_options(target, draft, maxNewTokens=8))
        wire.notify("textDocument/didOpen", {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": PY_SOURCE}})
        column, version = 8, 1
        for n in range(changes):
            version += 1
            typing = (n // 40) % 2 == 0  # 40 keystrokes typed, then 40 erased
            if typing:
                edit = {"range": {"start": {"line": LINE, "character": column},
                                  "end": {"line": LINE, "character": column}}, "text": "x"}
                column += 1
            else:
                edit = {"range": {"start": {"line": LINE, "character": column - 1},
                                  "end": {"line": LINE, "character": column}}, "text": ""}
                column -= 1
            wire.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": version},
                                                    "contentChanges": [edit]})
            if n % every == 0 and asked < completions:
                asked += 1
                wire.request(f"k{asked}", "textDocument/inlineCompletion", {
                    "textDocument": {"uri": URI}, "position": {"line": LINE, "character": column},
                    "context": {"triggerKind": 1}})
                if asked % 20 == 0:  # keep the client roughly in step with the server
                    wire.wait_response(f"k{asked}", 60)
            if n % max(1, changes // 50) == 0 or n == changes - 1:
                stats = wire.call(f"stats-{n}", "specfill/stats", timeout_s=60)["result"]
                samples.append((n, stats["rss_bytes"]))
                for name, size in stats["tables"].items():
                    tables_max[name] = max(tables_max.get(name, 0), size)
        for k in range(1, asked + 1):
            wire.wait_response(f"k{k}", 60)
            done += 1
        final_stats = wire.call("final", "specfill/stats")["result"]
        doc = wire.call("doc", "specfill/document", {"uri": URI})["result"]
    finally:
        wire.close()
    warm = next(rss for n, rss in samples if n >= changes * warmup)
    end = samples[-1][1]
    return {
        "didChange sent": changes,
        "completions answered": done,
        "document in sync at the end": doc["inSync"] and doc["version"] == version,
        "rss after warm-up MB": round(warm / 2**20, 1),
        "rss at the end MB": round(end / 2**20, 1),
        "rss growth after warm-up %": round(100 * (end - warm) / warm, 2),
        "largest table sizes": tables_max,
        "final table sizes": final_stats["tables"],
        "seconds": round(time.monotonic() - t0, 1),
    }


def main() -> None:
    from tests.tiny_hf import make_tiny_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--completions", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("bench-results/soak.json"))
    args = parser.parse_args()
    target, draft = make_tiny_pair(Path(tempfile.mkdtemp(prefix="specfill-soak-")))
    result = run_soak(str(target), str(draft), args.changes, args.completions)
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
