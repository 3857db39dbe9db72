"""The peers benchmark's bookkeeping: rows, the llama.cpp comparison, the missing-peer path."""

from __future__ import annotations

import sys

import pytest

from lsp_server.bench.peers import run_block, summarize, summarize_row, write_report
from lsp_server.bench.peers_llama import why_not


def result(prompt: str, tokens: list[int], seconds: float, **extra: object) -> dict:
    return {"prompt": prompt, "tokens": tokens, "n": len(tokens), "seconds": seconds,
            "tokens_per_s": len(tokens) / seconds, **extra}


def timed(prompt: str, n: int, seconds_per_token: float, block: int = 0, first: float = 0.0) -> dict:
    times = [first + seconds_per_token * (i + 1) for i in range(n)]
    return result(prompt, [1] * n, times[-1] if times else 0.0, block=block, token_times_s=times)


def test_specfill_is_compared_with_llama_cpp_over_the_same_tokens_of_each_prompt_in_its_block() -> None:
    # llama.cpp wrote 40 tokens of prompt "a" at 40 tok/s in block 0, and at 20 tok/s in block 1
    # (a busier machine); specfill stopped after 10 tokens (block 0) or wrote 60 (block 1).
    results = {
        "llama-server": [timed("a", 40, 1 / 40, block=0), timed("a", 40, 1 / 20, block=1)],
        "specfill gguf plain": [timed("a", 10, 1 / 10, block=0)],
        "specfill gguf speculative": [timed("a", 60, 1 / 40, block=1)],
    }
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]

    summary = summarize(rows, results)
    vs = summary["specfill_vs_llamacpp"]

    assert summary["reference"] == "llama-server"
    assert vs["per_mode"]["specfill gguf plain"]["tokens"] == 10  # the shorter output sets n
    assert vs["per_mode"]["specfill gguf plain"]["ratio"] == pytest.approx(10 / 40)
    assert vs["per_mode"]["specfill gguf speculative"]["tokens"] == 40
    assert vs["per_mode"]["specfill gguf speculative"]["ratio"] == pytest.approx(2.0)
    assert (vs["best_mode"], vs["best"]) == ("specfill gguf speculative", pytest.approx(2.0))


def test_the_cpp_server_is_the_reference_where_it_ran_else_llama_cpp_python() -> None:
    results = {"llama.cpp plain": [timed("a", 10, 0.1)], "specfill gguf plain": [timed("a", 10, 0.05)]}
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]
    summary = summarize(rows, results)
    assert summary["reference"] == "llama.cpp plain"
    assert summary["specfill_vs_llamacpp"]["best"] == pytest.approx(2.0)


def test_without_llama_cpp_there_is_no_ratio() -> None:
    results = {"specfill bf16 plain": [result("a", [1] * 10, 1.0, block=0)]}
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]
    assert "specfill_vs_llamacpp" not in summarize(rows, results)


def test_rows_count_outputs_identical_to_llama_cpp_per_prompt() -> None:
    reference = [result("a", [1, 2, 3, 4], 1.0), result("b", [5, 6], 1.0)]
    ours = [result("a", [1, 2, 3, 4], 2.0), result("b", [5, 7], 2.0)]

    row = summarize_row("specfill int8 plain", ours, reference, 0.5)

    assert row["identical_to_reference"] == 0.5
    assert row["common_prefix_share_vs_reference"] == pytest.approx(0.75)  # median of 1.0 and 0.5
    assert row["tokens_per_s"] == pytest.approx(6 / 4)


def test_acceptance_counts_every_drafted_token() -> None:
    stats = [{"drafted": 10, "accepted": 9, "ttft_s": 0.2}, {"drafted": 30, "accepted": 11, "ttft_s": 0.4}]
    rows = [result("a", [1], 1.0, stats=stats[0]), result("b", [1], 1.0, stats=stats[1])]
    row = summarize_row("specfill bf16 speculative", rows, None, 0.0)
    assert row["acceptance_rate"] == pytest.approx(20 / 40)
    assert row["median_ttft_s"] == pytest.approx(0.3)


def test_a_missing_llama_cpp_is_reported_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` raise ImportError
    assert "scripts/install-llama-cpp.sh" in (why_not("plain", None) or "")


def test_the_headline_is_specfills_best_row_against_llama_servers_best_row() -> None:
    # llama-server's n-gram mode is its fastest here (50 tok/s), specfill's speculative row ours.
    results = {
        "llama-server": [timed("a", 40, 1 / 30)],
        "llama-server draft": [timed("a", 40, 1 / 20)],
        "llama-server ngram-mod": [timed("a", 40, 1 / 50)],
        "specfill gguf plain": [timed("a", 40, 1 / 40)],
        "specfill gguf speculative": [timed("a", 40, 1 / 60)],
    }
    rows = [summarize_row(name, runs, None, 0.1) for name, runs in results.items()]

    top = summarize(rows, results)["best_vs_best"]

    assert (top["specfill"], top["llama"]) == ("specfill gguf speculative", "llama-server ngram-mod")
    assert top["ratio"] == pytest.approx(60 / 50) and top["tokens"] == 40
    # Against llama-server plain alone it would have read 2.0x.
    assert summarize(rows, results)["specfill_vs_llamacpp"]["best"] == pytest.approx(2.0)


def test_a_llama_mode_that_fails_gets_a_row_saying_why_and_the_others_run(tmp_path) -> None:
    import argparse

    from lsp_server.bench.peers import Prompt, Recorder

    def broken(prompt):
        raise RuntimeError("llama-server exited (1)")

    runners = {"llama-server": lambda p: timed(p.name, 10, 0.03), "llama-server draft": broken,
               "specfill gguf plain": lambda p: timed(p.name, 10, 0.02)}
    recorder = Recorder(tmp_path, {"threads": 2}, {"llama-server ngram-simple": "this llama-server takes no "
                                                   "--spec-type ngram-simple"})
    run_block(0, runners, [Prompt("a", [1]), Prompt("b", [2])], recorder)

    assert sorted(recorder.results) == ["llama-server", "specfill gguf plain"]
    assert [len(r) for r in recorder.results.values()] == [2, 2]
    assert recorder.not_run["llama-server draft"].startswith("failed on ")
    args = argparse.Namespace(prompts="humaneval", limit=2, max_new_tokens=10)
    write_report(tmp_path, recorder.summary(), recorder.rows, args)
    report = (tmp_path / "results.md").read_text()
    assert "llama-server draft | not run: failed on" in report
    assert "not run: this llama-server takes no --spec-type ngram-simple" in report
    assert "best vs best: specfill gguf plain" in report


def test_llama_server_and_its_draft_get_the_thread_count_specfill_gets(tmp_path) -> None:
    from pathlib import Path

    from lsp_server.backends.llama_binary import LlamaServerProcess
    from lsp_server.bench.loading import bench_threads

    threads = bench_threads(0)  # the default: every CPU this process may use, on both sides
    server = LlamaServerProcess(tmp_path / "t.gguf", tmp_path / "d.gguf", threads=threads, binary=Path("/bin/true"))
    args = server.args
    assert args[args.index("-t") + 1] == str(threads) and args[args.index("-td") + 1] == str(threads)
    assert bench_threads(1) == 1
