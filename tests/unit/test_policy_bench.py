"""`specfill bench policy`: the class-labelled prompt set, the mode policies, the summary
math, and a smoke run of the whole benchmark on the tiny model pair."""

from __future__ import annotations

import json

import pytest

from lsp_server.bench import policy_bench as pb
from lsp_server.bench.policy_prompts import CLASSES, build_prompt_set, spots_in_source
from lsp_server.engine.controller import Controller
from lsp_server.engine.types import DraftPolicy, StopRule
from lsp_server.syntax.types import ContextKind

SOURCE = '''"""Synthetic module.

This module exists so that the benchmark has a small and known source to cut from.
"""
import os
import re
import sys
from pathlib import Path


class Colour(Enum):
    RED = 1
    GREEN = 2
    BLUE = 3
    ALPHA = 4


class Point:
    def __init__(self, x, y, z):
        self.x = x
        self.y = y
        self.z = z
        self.norm = None

    def name(self):
        return self.label


TABLE = {
    "a": 1,
    "b": 2,
    "c": 3,
    "d": 4,
}


def convolve(signal, kernel):
    """Convolve a signal with a kernel.

    The result is as long as the signal, and the edges are padded with zeros so that
    every output sample sees the whole of the kernel and nothing else.
    """
    out = []
    for i in range(len(signal)):
        acc = 0.0
        for j in range(len(kernel)):
            if 0 <= i - j < len(signal):
                acc += signal[i - j] * kernel[j]
        out.append(acc)
    return out
'''


@pytest.fixture(scope="module")
def spots():
    return spots_in_source(SOURCE, "synthetic.py")


def expected(spots, label: str) -> list[str]:
    return [s.expected for s in spots[label]]


# --- the prompt set ----------------------------------------------------------------------


def test_every_spot_removes_exactly_its_expected_text(spots):
    for label, found in spots.items():
        for spot in found:
            assert spot.label == label
            assert spot.prefix + spot.expected + spot.suffix == SOURCE
            assert ContextKind(spot.classified)  # classify()'s kind is recorded


def test_import_spots_keep_the_keyword_and_remove_up_to_three_import_lines(spots):
    assert expected(spots, "imports")[0] == "os\nimport re\nimport sys"
    assert "pathlib import Path" in expected(spots, "imports")
    assert all(s.prefix.endswith(("import ", "from ")) for s in spots["imports"])


def test_signature_spots_start_after_def_and_end_at_the_colon(spots):
    assert expected(spots, "signatures") == ["__init__(self, x, y, z):", "name(self):", "convolve(signal, kernel):"]
    assert all(s.prefix.endswith("def ") and s.suffix.startswith("\n") for s in spots["signatures"])


def test_literal_spots_are_whole_element_lines_after_the_first_element(spots):
    assert expected(spots, "literals") == ['"b": 2,\n    "c": 3,\n    "d": 4,', '"c": 3,\n    "d": 4,', '"d": 4,']


def test_member_spots_are_runs_of_enum_members_and_self_assignments(spots):
    assert expected(spots, "members") == [
        "GREEN = 2\n    BLUE = 3\n    ALPHA = 4", "BLUE = 3\n    ALPHA = 4",
        "self.y = y\n        self.z = z\n        self.norm = None", "self.z = z\n        self.norm = None"]


def test_simple_bodies_are_whole_branchless_bodies(spots):
    assert "return self.label" in expected(spots, "simple")
    assert not any("for " in e or "out.append" in e for e in expected(spots, "simple"))


def test_complex_spots_are_arithmetic_inside_nested_loops_and_ifs(spots):
    assert expected(spots, "complex") == ["acc += signal[i - j] * kernel[j]"]


def test_docstring_spots_are_prose_paragraphs_after_the_first_line(spots):
    assert expected(spots, "docstrings") == [
        "This module exists so that the benchmark has a small and known source to cut from.",
        "The result is as long as the signal, and the edges are padded with zeros so that\n"
        "    every output sample sees the whole of the kernel and nothing else."]


def test_prompt_set_is_deterministic_and_takes_one_spot_per_class_per_file(tmp_path):
    files = []
    for i in range(3):
        path = tmp_path / f"m{i}.py"
        path.write_text(SOURCE.replace("convolve", f"convolve{i}"))
        files.append(path)
    first = build_prompt_set(2, seed=5, files=files, root=tmp_path)
    again = build_prompt_set(2, seed=5, files=files, root=tmp_path)
    assert [(s.name, s.expected) for s in first] == [(s.name, s.expected) for s in again]
    assert [s.label for s in first] == [c for c in CLASSES for _ in range(2)]
    for c in CLASSES:
        names = [s.name.split(":")[0] for s in first if s.label == c]
        assert len(set(names)) == len(names)


def test_prompt_set_rejects_unknown_classes():
    with pytest.raises(ValueError, match="unknown classes"):
        build_prompt_set(1, ["imports", "poetry"], files=[])


# --- the modes ---------------------------------------------------------------------------


TABLE_POLICY = DraftPolicy(context="import", k_init=6, k_min=2, k_max=10, max_new_tokens=32,
                           stop=StopRule("line"), draft_p_min=0.4, entropy_high=3.0, entropy_low=1.5)


@pytest.mark.parametrize("mode", [m for m in pb.MODES if m != "policy"])
def test_baselines_never_fall_back_on_entropy_and_stop_only_at_the_budget(mode):
    p = pb.mode_policy(mode, 40, TABLE_POLICY)
    assert p.stop == StopRule("none") and p.max_new_tokens == 40
    assert not Controller(p).entropy_switching


def test_each_baseline_measures_one_strategy():
    fixed = pb.mode_policy("fixed-4", 40, TABLE_POLICY)
    assert (fixed.mode, fixed.k_init, fixed.k_min, fixed.k_max) == ("fixed", 4, 4, 4)
    assert fixed.draft_p_min == 0.0 and not fixed.prompt_lookup
    assert pb.mode_policy("target", 40, TABLE_POLICY).mode == "off"
    heuristic = pb.mode_policy("heuristic", 40, TABLE_POLICY)
    assert (heuristic.mode, heuristic.k_init, heuristic.draft_p_min) == ("adaptive", 4, 0.0)
    confidence = pb.mode_policy("confidence", 40, TABLE_POLICY)
    assert (confidence.k_max, confidence.draft_p_min, confidence.prompt_lookup) == (8, 0.5, False)
    lookup = pb.mode_policy("lookup", 40, TABLE_POLICY)
    assert lookup.prompt_lookup and not lookup.model_draft


def test_policy_mode_is_the_table_policy_with_no_stop_rule_and_the_bench_budget():
    p = pb.mode_policy("policy", 40, TABLE_POLICY)
    assert p == DraftPolicy(context="import", k_init=6, k_min=2, k_max=10, max_new_tokens=40,
                            stop=StopRule("none"), draft_p_min=0.4, entropy_high=3.0, entropy_low=1.5)


# --- the summary -------------------------------------------------------------------------


def run_row(n: int, seconds: float, prefill: float = 0.0, drafted: int = 0, accepted: int = 0,
            spec: int = 0, plain: int = 0, tokens: list[int] | None = None) -> dict:
    return {"n": n, "seconds": seconds, "tokens": tokens if tokens is not None else list(range(n)),
            "stats": {"prefill_s": prefill, "drafted": drafted, "accepted": accepted,
                      "rounds": spec + plain, "speculative_rounds": spec, "plain_rounds": plain}}


def spot_row(label: str, **modes: dict) -> dict:
    return {"label": label, "classified": "import" if label == "imports" else "string",
            "agrees": label == "imports", **{m.replace("_", "-"): r for m, r in modes.items()}}


ROWS = [
    spot_row("imports", target=run_row(10, 1.0, plain=9), fixed_2=run_row(10, 0.5, drafted=8, accepted=4, spec=4),
             fixed_4=run_row(10, 0.4, drafted=12, accepted=6, spec=3),
             policy=run_row(10, 0.25, drafted=12, accepted=9, spec=2, plain=1)),
    spot_row("imports", target=run_row(30, 6.0, plain=29), fixed_2=run_row(30, 2.0, drafted=20, accepted=15, spec=10),
             fixed_4=run_row(30, 3.0, drafted=24, accepted=12, spec=6),
             policy=run_row(30, 1.75, drafted=20, accepted=19, spec=5, plain=2)),
    spot_row("docstrings", target=run_row(20, 4.0, prefill=1.0, plain=19),
             fixed_2=run_row(20, 5.0, prefill=1.0, drafted=20, accepted=4, spec=10),
             fixed_4=run_row(20, 8.0, prefill=1.0, drafted=40, accepted=5, spec=10),
             policy=run_row(20, 5.0, prefill=1.0, drafted=4, accepted=1, spec=2, plain=15, tokens=[9] * 20)),
]
MODES = ["target", "fixed-2", "fixed-4", "policy"]


def test_tokens_per_s_is_total_tokens_over_total_time_per_class():
    per_class = pb.summarize(ROWS, MODES)["per_class"]
    assert per_class["imports"]["target"]["tokens_per_s"] == pytest.approx(40 / 7.0)
    assert per_class["imports"]["policy"]["tokens_per_s"] == pytest.approx(40 / 2.0)
    assert per_class["imports"]["policy"]["speedup_vs_target"] == pytest.approx(7.0 / 2.0)
    assert per_class["docstrings"]["fixed-4"]["tokens_per_s"] == pytest.approx(20 / 8.0)


def test_acceptance_accepted_per_round_and_plain_share_come_from_totals():
    imports = pb.summarize(ROWS, MODES)["per_class"]["imports"]["policy"]
    assert imports["acceptance_rate"] == pytest.approx(28 / 32)
    assert imports["mean_accepted_per_round"] == pytest.approx(28 / 7)
    assert imports["plain_round_share"] == pytest.approx(3 / 10)
    target = pb.summarize(ROWS, MODES)["per_class"]["imports"]["target"]
    assert target["acceptance_rate"] is None and target["plain_round_share"] == 1.0


def test_headline_ratios():
    s = pb.summarize(ROWS, MODES)
    # overall tokens/s: fixed-2 60/7.5 = 8.0, fixed-4 60/11.4 = 5.26, policy 60/7.0
    assert s["best_fixed"] == "fixed-2"
    assert s["policy_vs_best_fixed"] == pytest.approx((60 / 7.0) / (60 / 7.5))
    assert s["high_entropy_vs_plain"] == pytest.approx((20 / 5.0) / (20 / 4.0))
    assert s["boilerplate_speedup_vs_target"] == pytest.approx((40 / 2.0) / (40 / 7.0))
    assert s["targets"]["boilerplate_speedup_vs_target"]["met"] is True
    assert s["targets"]["high_entropy_vs_plain"]["met"] is False
    # after the prefill: (n - 1) tokens over (seconds - prefill)
    assert s["decode"]["high_entropy_vs_plain"] == pytest.approx((19 / 4.0) / (19 / 3.0))


def test_classifier_agreement_and_identical_output_rates():
    s = pb.summarize(ROWS, MODES)
    assert s["classifier"]["imports"] == {"agreement": 1.0, "kinds": {"import": 2}}
    assert s["classifier"]["docstrings"]["agreement"] == 0.0
    assert s["identical_to_target_rate"]["policy"] == pytest.approx(2 / 3)
    assert s["identical_to_target_rate"]["fixed-2"] == 1.0


def test_summary_without_policy_or_target_leaves_ratios_empty():
    s = pb.summarize(ROWS, ["fixed-2", "fixed-4"])
    assert s["policy_vs_best_fixed"] is None and s["high_entropy_vs_plain"] is None
    assert s["targets"]["policy_vs_best_fixed"]["met"] is None
    assert "identical_to_target_rate" not in s


def test_round_trace_marks_plain_rounds_as_k_zero_without_acceptance():
    assert pb.round_trace({"k_trace": [4, 0, 6, 2], "accepted_lengths": [3, 6, 0]}) == (
        [4, 0, 6, 2], [3, None, 6, 0])


def test_estimate_counts_prefill_and_decoding_per_mode():
    plain = pb.estimate_seconds([210], [10], ["target"])
    assert plain == pytest.approx(1.0 + 10 * pb.TARGET_STEP_S)
    both = pb.estimate_seconds([210, 210], [10, 10], ["target", "fixed-4"])
    assert both > 2 * plain  # the draft's prefill is extra; its decoding is guessed faster


# --- smoke ---------------------------------------------------------------------------------


def test_whole_benchmark_on_the_tiny_pair_writes_results(tmp_path):
    from lsp_server.cli import main
    from tests.tiny_hf import make_tiny_pair

    target, draft = make_tiny_pair(tmp_path / "models")
    out = tmp_path / "out"
    assert main(["bench", "policy", "--target", str(target), "--draft", str(draft), "--dtype", "fp32",
                 "--per-class", "1", "--max-new-tokens", "8", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    summary = results["summary"]
    for key in ("policy_vs_best_fixed", "high_entropy_vs_plain", "boilerplate_speedup_vs_target", "per_class"):
        assert key in summary
    assert set(summary["per_class"]) == set(CLASSES)
    assert set(summary["per_class"]["imports"]) == set(pb.MODES)
    for mode in pb.MODES:
        assert summary["per_class"]["imports"][mode]["tokens_per_s"] > 0
    # fp32, greedy: every strategy generates the target's own tokens
    assert all(rate == 1.0 for rate in summary["identical_to_target_rate"].values())
    assert len(results["rows"]) == len(CLASSES)
    assert all(r["lookup"]["stats"]["drafters"].keys() <= {"lookup"} for r in results["rows"])
    for name in ("results.md", "speedup_by_class.png", "k_trace.png"):
        assert (out / name).stat().st_size > 0
