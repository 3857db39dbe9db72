"""`specfill bench speculation`: the replay it builds and the figures it reports."""

from __future__ import annotations

from pathlib import Path

from lsp_server.bench.speculation_report import report_text, summarize
from lsp_server.bench.speculation_session import replay_steps

SOURCE = '''import os


def walk(root, suffix):
    found = []
    for name in os.listdir(root):
        if name.endswith(suffix):
            found.append(os.path.join(root, name))
    return sorted(found)


print(walk(".", ".py"))
'''


def test_the_replay_writes_the_function_again_below_itself_a_line_at_a_time():
    steps = replay_steps(Path("/x/walk.py"), SOURCE, lines_wanted=3)
    assert [s.label for s in steps] == [f"replay walk.py:walk line {j}" for j in (1, 2, 3)]
    third = steps[2]
    lines = third.text.split("\n")
    assert lines[third.line - 3:third.line + 1] == [
        "def walk_again(root, suffix):", "    found = []", "    for name in os.listdir(root):", "        "]
    assert third.column == 8
    assert lines[-2] == 'print(walk(".", ".py"))'  # the rest of the file stays below


def row(label: str, tokens: int, off_s: float, on_s: float, same: bool = True, group: str = "spot") -> dict:
    off = {"final_s": off_s, "generated_tokens": tokens, "context": "call_args", "completion": "x"}
    on = {"final_s": on_s, "generated_tokens": tokens, "context": "call_args",
          "completion": "x" if same else "y", "drafters": {"pool": {"drafted": 4, "accepted": 3}}}
    return {"group": group, "label": label, "first": "off", "off": off, "adaptive": on}


def test_the_summary_splits_lines_from_blocks_and_counts_slower_and_differing_spots():
    rows = [row("a", 5, 0.3, 0.2), row("b", 8, 0.3, 0.4), row("c", 30, 1.0, 0.4, same=False),
            row("d", 12, 0.5, 0.1, group="replay"),
            {"group": "spot", "label": "e", "off": {"timeout": True}, "adaptive": {"final_s": 1.0}},
            row("f", 9, 0.01, 0.02, group="replay")]
    for answer in (rows[-1]["off"], rows[-1]["adaptive"]):  # no model call either way
        answer.update(rounds=0, known_tokens=9)
    summary = summarize(rows)
    groups = summary["groups"]
    assert groups["lines"]["spots"] == 2 and groups["blocks"]["spots"] == 1
    assert groups["lines"]["slower"] == 1 and groups["all spots"]["identical"] == 2
    assert groups["replay"]["ratio_median"] == 5.0 and summary["timeouts"] == 1
    assert summary["known_in_full"] == 1
    assert groups["blocks"]["drafted_accepted"] == {"pool": [4, 3]}
    text = report_text(summary, {"cpu": "test"}, 3)
    assert "| outputs identical | 3/4 |" in text


def test_the_bound_is_what_perfect_drafts_would_give_at_the_servers_round_costs():
    from lsp_server.bench.speculation_report import perfect_rounds_s, row_costs

    shown = {"target_feed_ms_by_rows": [30.0, 33.0, 36.0, 40.0], "draft_step_ms": 10.0,
             "draft_catch_up_ms_a_token": 3.0, "prefill_ms_a_token": 5.0}
    costs = row_costs(shown)
    # 8 tokens: free drafts in one verify of 8 rows (40 ms, and the timed slope of 10/3 ms a
    # row past the 4 timed); the model's too, its first round drafted at rest
    assert abs(perfect_rounds_s(8, costs, free=True) - (0.04 + 4 * 0.01 / 3)) < 1e-9
    assert perfect_rounds_s(8, costs, free=False) == perfect_rounds_s(8, costs, free=True)
    # 12: the model's first round verifies its 8 tokens drafted at rest (9 rows), then a
    # round of k = 2 (2 steps + 3 rows, 56 ms) settles the last 3
    assert abs(perfect_rounds_s(12, costs, free=False) - (0.04 + 5 * 0.01 / 3 + 0.056)) < 1e-9
    off = {"final_s": 0.34, "verify_s": 0.24, "rounds": 8, "generated_tokens": 9, "context": "c",
           "completion": "x"}
    on = {"final_s": 0.2, "generated_tokens": 9, "context": "c", "completion": "x"}
    summary = summarize([{"group": "spot", "label": "a", "off": off, "adaptive": on}], shown)
    lines = summary["groups"]["lines"]
    assert abs(lines["bound_free_median"] - (0.1 + 0.24) / (0.1 + 0.04 + 4 * 0.01 / 3)) < 1e-9
    assert "at best" in report_text(summary, {"cpu": "test"}, 1)


def test_a_saved_run_is_reported_again_with_this_codes_summary(tmp_path):
    """`--report-from`: the requests of a run, summed up again; no server started."""
    import argparse
    import json

    from lsp_server.bench.speculation_session import add_arguments, run

    off = {"final_s": 0.34, "verify_s": 0.24, "rounds": 8, "generated_tokens": 9, "context": "c",
           "completion": "x"}
    on = {"final_s": 0.2, "generated_tokens": 9, "context": "c", "completion": "x"}
    shown = {"target_feed_ms_by_rows": [30.0, 33.0, 36.0, 40.0], "draft_step_ms": 10.0,
             "draft_catch_up_ms_a_token": 3.0, "prefill_ms_a_token": 5.0}
    saved = {"summary": {}, "machine": {"cpu": "the saved run's"}, "args": {"spots": 1, "seed": 3},
             "rows": [{"group": "spot", "label": "a", "off": off, "adaptive": on}],
             "server_stats": {"off": {}, "adaptive": {"round_costs": shown}}, "load_log": []}
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "again"
    assert run(parser.parse_args(["--report-from", str(tmp_path / "saved.json"), "--out", str(out)])) == 0
    again = json.loads((out / "speculation.json").read_text())
    assert again["machine"] == saved["machine"] and again["args"] == saved["args"]
    assert abs(again["summary"]["groups"]["lines"]["ratio_median"] - 1.7) < 1e-9
    assert "the saved run's" in (out / "speculation.md").read_text()
