"""The scripted LSP client, the demo and `specfill bench lsp`, against the real server on
the tiny model pair (the default pair is exercised by `make demo` and the benchmark)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcRequestCancelled

from lsp_server.bench.lsp_bench import (Spot, document_without, find_spot, is_pause,
                                        keystroke_gaps, summarize)
from lsp_server.client import SpecfillClient
from tests.e2e.conftest import PY_SOURCE, tiny_options

URI = "file:///work/client-example.py"
ROOT = Path(__file__).resolve().parents[2]


async def test_client_streams_a_completion_and_reads_the_stats(tiny_pair_dirs):
    async with SpecfillClient(tiny_options(*tiny_pair_dirs, warm=False)) as client:
        assert client.init_result.capabilities.inline_completion_provider is not None
        ready = await client.wait_ready(60)
        assert ready["engine"]["ready"] and ready["totals"]["requests"] == 0
        client.open(URI, "python", PY_SOURCE)
        text, timings = await client.complete(URI, 11, 8)
        assert text.strip()
        partial = [u for u in timings.updates if not u.done]
        assert len(partial) >= 2 and all(text.startswith(u.text) for u in partial)
        assert timings.updates[-1].done and timings.updates[-1].text == text
        assert timings.sent < timings.first_text <= timings.answered
        assert 0 < timings.first_text_s <= timings.final_s
        s = await client.stats()
        assert s["last"]["generated_tokens"] >= 1
        # keys as the server wrote them (pygls's namedtuples renamed "context/stop" to "_0")
        assert s["acceptance_memory"] and all("/" in key for key in s["acceptance_memory"])
        assert s["last"]["prefilled_tokens"] == s["last"]["prompt_tokens"]  # no warm: cold
        drafters = s["last"]["drafters"].values()
        assert sum(d["drafted"] for d in drafters) == s["last"]["drafted"]
        assert all(0 <= d["accepted"] <= d["drafted"] for d in drafters)
        assert await client.wait_message("models ready")
    assert client.returncode == 0


async def test_client_edits_warm_the_cache_and_cancel_leaves_the_worker_idle(tiny_pair_dirs):
    async with SpecfillClient(tiny_options(*tiny_pair_dirs, maxNewTokens=16)) as client:
        await client.wait_ready(60)
        client.open(URI, "python", PY_SOURCE)
        await client.complete(URI, 11, 8)
        cold = (await client.stats())["last"]
        client.insert(URI, 2, 11, 8, "s")
        await client.complete(URI, 11, 9)
        warm = (await client.stats())["last"]
        # The typed "s" replaces the healed last token (psm-line), so the count may stay.
        assert warm["prompt_tokens"] >= cold["prompt_tokens"]
        assert warm["prefilled_tokens"] < cold["prefilled_tokens"] / 2

        client.configure({"maxNewTokens": 4000})
        task = asyncio.ensure_future(client.complete(URI, 4, 4, msg_id="long-one"))
        deadline = time.monotonic() + 20
        while not client.streams.get("long-one"):
            assert time.monotonic() < deadline, "no stream notification within 20 s"
            await asyncio.sleep(0.01)
        client.cancel("long-one")
        with pytest.raises(JsonRpcRequestCancelled):
            await task
        assert await client.wait_idle(10)


def _type_back(source: str, spot: Spot) -> str:
    """Apply the spot's keystrokes to the document as the server's incremental edits do."""
    lines = document_without(source, spot).splitlines(keepends=True)
    line, col = spot.start, len(spot.indent)
    for key in spot.keystrokes():
        text = lines[line]
        lines[line] = text[:col] + key + text[col:]
        lines = "".join(lines).splitlines(keepends=True)
        line, col = (line + 1, len(key) - 1) if key.startswith("\n") else (line, col + len(key))
    return "".join(lines)


@pytest.mark.parametrize("chars", [12, 40, 100, 250])
def test_typing_the_keystrokes_back_restores_the_source(chars):
    from lsp_server.bench.lsp_bench import default_file

    source = default_file().read_text()
    spot = find_spot(source, chars)
    assert spot.start >= len(source.splitlines()) // 2  # a long prefix, as in a real edit
    assert document_without(source, spot) != source
    assert _type_back(source, spot) == source
    assert abs(len(spot.keystrokes()) - chars) <= chars


def test_pauses_fall_after_words_and_new_lines_and_at_the_end():
    keys = Spot("f", 0, 2, ("    x = 1", "    return x")).keystrokes()
    assert keys[:5] == ["x", " ", "=", " ", "1"] and keys[5] == "\n    "
    word = [i for i, k in enumerate(keys) if is_pause(k, keys[i + 1] if i + 1 < len(keys) else None, "word")]
    line = [i for i, k in enumerate(keys) if is_pause(k, keys[i + 1] if i + 1 < len(keys) else None, "line")]
    assert word == [1, 3, 5, 12, len(keys) - 1]
    assert line == [5, len(keys) - 1]
    gaps = keystroke_gaps(200, 8.0, seed=3)
    assert gaps == keystroke_gaps(200, 8.0, seed=3)
    assert all(0.5 / 8 <= g <= 1.55 / 8 for g in gaps) and 0.1 < sum(gaps) / len(gaps) < 0.14


def _event(first, final, outcome="completed", cold=False, prefilled=None, idle=None):
    return {"cold": cold, "first_token_s": first, "final_s": final, "outcome": outcome,
            "prefilled_tokens": prefilled, "cancel_idle_s": idle}


def test_summary_uses_nearest_rank_percentiles_and_keeps_cold_apart():
    warm = [_event(i / 10, i / 10 + 1.0, prefilled=10 * i) for i in range(1, 11)]
    events = ([_event(2.0, 4.0, cold=True, prefilled=900)] + warm
              + [_event(None, 0.05, outcome="cancelled", idle=0.07),
                 _event(0.3, 0.35, outcome="cancelled", idle=0.09)])
    s = summarize(events, [0.01, 0.02, 0.03, 0.04, 0.5], typing_s=5.0)
    assert s["first_token_cold_p50_s"] == 2.0
    # warm first tokens: 0.1 .. 1.0 and the cancelled request's 0.3 (11 values)
    assert s["first_token_warm_p50_s"] == pytest.approx(0.5)
    assert s["first_token_warm_p95_s"] == pytest.approx(1.0)
    assert s["final_p50_s"] == pytest.approx(1.5)  # completed warm only: 1.1 .. 2.0, rank 4.5 -> 4
    assert s["cancel_idle_p50_s"] == 0.03 and s["cancel_idle_p95_s"] == 0.5
    assert s["cancel_idle_client_p50_s"] == 0.07
    assert s["prefilled_tokens_p50"] == 50
    assert s["completions_per_s_typing"] == pytest.approx(10 / 5.0)
    assert s["cancelled_before_first_token"] == 1
    assert s["outcomes"] == {"completed": 11, "cancelled": 2}


def test_summary_of_nothing_is_none_not_an_error():
    s = summarize([], [], typing_s=0.0)
    assert s["first_token_warm_p50_s"] is None and s["cancel_idle_p95_s"] is None
    assert s["completions_per_s_typing"] is None


def test_lsp_bench_smoke_run_writes_the_summary(tiny_pair_dirs, tmp_path):
    target, draft = tiny_pair_dirs
    out = tmp_path / "lsp"
    subprocess.run(
        [sys.executable, "-m", "lsp_server", "bench", "lsp", "--chars", "12", "--out", str(out),
         "--target", target, "--draft", draft, "--dtype", "fp32", "--threads", "1",
         "--max-new-tokens", "16", "--cps", "30", "--debounce-ms", "40", "--pause-at", "line"],
        check=True, cwd=ROOT, timeout=300, capture_output=True)
    result = json.loads((out / "results.json").read_text())
    summary = result["summary"]
    for key in ("first_token_warm_p50_s", "first_token_warm_p95_s", "first_token_cold_p50_s",
                "final_p50_s", "cancel_idle_p50_s", "cancel_idle_p95_s", "prefilled_tokens_p50",
                "completions_per_s_typing"):
        assert key in summary
    assert summary["first_token_cold_p50_s"] > 0 and summary["keystrokes"] >= 12
    assert result["events"][0]["cold"] and len(result["events"]) >= 2
    assert (out / "results.md").exists() and (out / "latency.png").stat().st_size > 0


def test_demo_runs_on_the_tiny_pair_and_shows_the_warm_cache(tiny_pair_dirs):
    target, draft = tiny_pair_dirs
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.commands.demo", "--target", target, "--draft", draft,
         "--dtype", "fp32", "--max-new-tokens", "12"],
        cwd=ROOT, timeout=300, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "streamed updates" in out and "acceptance rate" in out
    prefilled = [line for line in out.splitlines() if " prefilled " in line and "first token" in line]
    assert len(prefilled) == 2
    first, second = (int(line.split("prefilled")[1].split()[0]) for line in prefilled)
    assert second < first


def test_demo_quant_sets_both_models_weights():
    from lsp_server.commands.demo import parse_args, server_options

    assert server_options(parse_args(["--quant", "gguf"]))["model"] == {"quant": "gguf", "draftQuant": "gguf"}
    assert "model" not in server_options(parse_args([]))  # the server's own defaults
