"""The arithmetic of `specfill bench bound`: run lengths, the best schedule, fixed-k rounds."""

import random

import pytest

from lsp_server.bench.bound import (Costs, best_schedule, fixed_k_seconds, lookup_runs, prompt_times,
                                    run_lengths, summarize)

FLAT = Costs(plain=1.0, verify={r: 1.0 for r in range(1, 14)}, draft_step=0.1)


def test_run_lengths_count_right_guesses_in_a_row():
    assert run_lengths([True, True, False, True, False, False, True]) == [2, 1, 0, 1, 0, 0, 1]
    assert run_lengths([]) == []


def test_lookup_runs_compare_the_proposal_with_what_the_target_wrote():
    prompt = [1, 2, 3, 4, 5, 9, 1, 2]  # "1 2" was followed by "3 4 5" before
    assert lookup_runs(prompt, [3, 4, 7, 8], k_max=8)[0] == 2  # proposes 3 4 5 ..., target wrote 3 4 7
    assert lookup_runs([5, 6], [7], k_max=8) == [0]  # no earlier n-gram: no proposal


def test_best_schedule_drafts_exactly_the_run_when_drafting_is_cheap():
    # Draft right for 3 tokens from position 0: 3 draft steps + one 4-row verify make 4 tokens.
    seconds, rounds = best_schedule([3, 2, 1, 0], [0, 0, 0, 0], FLAT, k_max=8)
    assert rounds == 1 and seconds == pytest.approx(3 * 0.1 + 1.0)


def test_best_schedule_decodes_plainly_when_drafts_cost_more_than_they_save():
    costly = Costs(plain=1.0, verify={r: 1.0 + r for r in range(1, 14)}, draft_step=0.5)
    seconds, rounds = best_schedule([3, 2, 1, 0], [0, 0, 0, 0], costly, k_max=8)
    assert rounds == 4 and seconds == pytest.approx(4.0)


def test_best_schedule_uses_free_lookup_proposals_and_respects_k_max():
    seconds, rounds = best_schedule([0] * 6, [5, 4, 3, 2, 1, 0], FLAT, k_max=2)
    assert rounds == 2 and seconds == pytest.approx(2.0)  # 3 tokens per verify at most


def test_best_schedule_is_never_slower_than_fixed_k_or_plain_decoding():
    rng = random.Random(0)
    costs = Costs(plain=0.12, verify={1: 0.12, 2: 0.15, 3: 0.13, 4: 0.12, 5: 0.12, 6: 0.12, 7: 0.14,
                                      8: 0.16, 9: 0.17}, draft_step=0.02)
    for _ in range(50):
        hits = [rng.random() < 0.8 for _ in range(rng.randint(1, 60))]
        runs = run_lengths(hits)
        best, _ = best_schedule(runs, [0] * len(runs), costs, k_max=8)
        assert best <= len(runs) * costs.plain + 1e-12
        for k in (2, 4, 8):
            assert best <= fixed_k_seconds(runs, k, costs) + 1e-12


def test_fixed_k_rounds_advance_by_the_accepted_prefix_plus_one():
    # k=2: position 0 accepts 2 (+1) -> 3; position 3 accepts 0 (+1) -> 4; done.
    assert fixed_k_seconds([5, 4, 3, 0], 2, FLAT) == pytest.approx(2 * (2 * 0.1 + 1.0))


def test_costs_past_the_measured_rows_use_the_largest_measured():
    assert Costs(1.0, {1: 1.0, 2: 1.5}, 0.1).verify_s(9) == 1.5


def test_summary_groups_and_ratios():
    row = {"draft_runs": [3, 2, 1, 0], "lookup_runs": [0, 0, 0, 0], "target_prefill_s": 1.0,
           "draft_prefill_s": 0.5, "measured_target_s": 5.0, "measured_spec_s": 2.5, "groups": ["imports"]}
    times = prompt_times(row, FLAT, k_max=8)
    assert times["target"] == pytest.approx(1.0 + 4 * 1.0)
    assert times["best"] == pytest.approx(1.5 + 0.3 + 1.0)
    summary = summarize([row, {**row, "groups": []}], FLAT, k_max=8)
    assert summary["fixed_k"] == [2, 4, 8] and summarize([row], FLAT, k_max=3)["fixed_k"] == [2]
    assert set(summary["groups"]) == {"all", "imports"}
    assert summary["groups"]["all"]["prompts"] == 2 and summary["groups"]["imports"]["prompts"] == 1
    assert summary["groups"]["all"]["best_speedup"] == pytest.approx(5.0 / 2.8)
    assert summary["groups"]["all"]["measured_speedup"] == pytest.approx(2.0)
    assert summary["groups"]["all"]["share_of_best"] == pytest.approx(2.8 / 2.5)  # the simulation can be beaten
    assert summary["groups"]["all"]["draft_hit_rate"] == pytest.approx(0.75)
    assert summary["groups"]["all"]["best_tokens_per_s"] == pytest.approx(8 / 5.6)


def test_the_source_run_must_be_an_engine_or_policy_result(tmp_path):
    from lsp_server.bench.bound import _source

    with pytest.raises(SystemExit, match="no results.json"):
        _source(str(tmp_path))
    (tmp_path / "results.json").write_text('{"args": {"bench_com')
    with pytest.raises(SystemExit, match="cannot read it"):
        _source(str(tmp_path))
    (tmp_path / "results.json").write_text('{"args": {"bench_command": "peers"}, "rows": [{}]}')
    with pytest.raises(SystemExit, match="not a `bench engine` or `bench policy` result"):
        _source(str(tmp_path))
    (tmp_path / "results.json").write_text('{"args": {"bench_command": "engine"}, "rows": [{"name": "p"}]}')
    assert _source(str(tmp_path))["rows"] == [{"name": "p"}]


def test_a_plain_step_costs_what_the_source_runs_target_alone_took_per_token():
    from lsp_server.bench.bound import source_plain_step

    rows = [{"target": {"n": 10, "seconds": 3.0, "stats": {"prefill_s": 1.0}}},
            {"target": {"n": 0, "seconds": 0.5, "stats": {"prefill_s": 0.5}}},
            {"target": {"n": 30, "seconds": 5.0, "stats": {"prefill_s": 1.0}}}]
    assert source_plain_step(rows) == pytest.approx(6.0 / 40)
