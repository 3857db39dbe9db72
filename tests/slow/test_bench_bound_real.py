"""`specfill bench bound` on the real pair: from a small `bench engine` run to its bound."""

from __future__ import annotations

import json

from lsp_server.bench import bound, engine_bench
from tests.bench_args import parse


def test_bound_of_a_small_engine_run(real_cache, tmp_path):
    source, out = tmp_path / "engine", tmp_path / "bound"
    assert engine_bench.run(parse(engine_bench, [
        "--limit", "2", "--max-new-tokens", "12", "--modes", "target,specfill", "--out", str(source)])) == 0
    assert bound.run(parse(bound, [
        "--from", str(source), "--k-max", "3", "--cost-prompts", "1", "--reps", "1", "--out", str(out)])) == 0

    result = json.loads((out / "results.json").read_text())
    rows, groups = result["rows"], result["summary"]["groups"]
    engine_rows = json.loads((source / "results.json").read_text())["rows"]
    assert [r["tokens"] for r in rows] == [r["target"]["n"] for r in engine_rows if r["target"]["n"]]
    for row in rows:  # a run of right guesses never reaches past the output
        assert all(0 <= run <= row["tokens"] - i for i, run in enumerate(row["draft_runs"]))
        assert row["draft_prefill_s"] > 0
    costs = result["summary"]["costs"]
    assert sorted(costs["verify_s"], key=int) == ["1", "2", "3", "4"] and costs["draft_step_s"] > 0
    everything = groups["all"]
    # The best schedule is never slower than the simulated fixed k or plain decoding.
    assert everything["best_speedup"] >= everything["fixed-2_speedup"] - 1e-9
    assert everything["best_speedup_decode"] >= 1.0 - 1e-9
    assert everything["target_simulated_s"] == everything["target_measured_s"]
    assert "best possible" in (out / "results.md").read_text()
