"""The peers benchmark's bookkeeping: rows, the llama.cpp comparison, the missing-peer path."""

from __future__ import annotations

import sys

import pytest

from lsp_server.bench.peers import llama_cpp_missing, summarize, summarize_row


def result(prompt: str, tokens: list[int], seconds: float, **extra: object) -> dict:
    return {"prompt": prompt, "tokens": tokens, "n": len(tokens), "seconds": seconds,
            "tokens_per_s": len(tokens) / seconds, **extra}


def test_specfill_vs_llamacpp_plain_pairs_each_mode_with_llama_cpp_runs_of_its_own_block() -> None:
    # The machine got twice as busy between blocks: llama.cpp itself slowed from 40 to 20 tok/s.
    results = {
        "llama.cpp plain": [result("a", [1] * 40, 1.0, block=0), result("a", [1] * 20, 1.0, block=1)],
        "specfill bf16 plain": [result("a", [1] * 10, 1.0, block=0)],
        "specfill int4-g32 speculative": [result("a", [1] * 20, 1.0, block=1)],
    }
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]

    vs = summarize(rows, results)["specfill_vs_llamacpp_plain"]

    assert vs["per_mode"] == {"specfill bf16 plain": 0.25, "specfill int4-g32 speculative": 1.0}
    assert (vs["best_mode"], vs["best"]) == ("specfill int4-g32 speculative", 1.0)


def test_without_llama_cpp_there_is_no_ratio() -> None:
    results = {"specfill bf16 plain": [result("a", [1] * 10, 1.0, block=0)]}
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]
    assert "specfill_vs_llamacpp_plain" not in summarize(rows, results)


def test_rows_count_outputs_identical_to_llama_cpp_per_prompt() -> None:
    reference = [result("a", [1, 2, 3, 4], 1.0), result("b", [5, 6], 1.0)]
    ours = [result("a", [1, 2, 3, 4], 2.0), result("b", [5, 7], 2.0)]

    row = summarize_row("specfill int8 plain", ours, reference, 0.5)

    assert row["identical_to_llamacpp_plain"] == 0.5
    assert row["common_prefix_share_vs_llamacpp_plain"] == pytest.approx(0.75)  # median of 1.0 and 0.5
    assert row["tokens_per_s"] == pytest.approx(6 / 4)


def test_acceptance_counts_every_drafted_token() -> None:
    stats = [{"drafted": 10, "accepted": 9, "ttft_s": 0.2}, {"drafted": 30, "accepted": 11, "ttft_s": 0.4}]
    rows = [result("a", [1], 1.0, stats=stats[0]), result("b", [1], 1.0, stats=stats[1])]
    row = summarize_row("specfill bf16 speculative", rows, None, 0.0)
    assert row["acceptance_rate"] == pytest.approx(20 / 40)
    assert row["median_ttft_s"] == pytest.approx(0.3)


def test_a_missing_llama_cpp_is_reported_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` raise ImportError
    assert "scripts/install-llama-cpp.sh" in (llama_cpp_missing() or "")
