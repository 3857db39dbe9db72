"""`specfill bench policy`: the syntax-aware draft policy vs fixed k and other strategies,
per context class (imports, signatures, literals, members, simple and complex bodies,
docstrings; see `policy_prompts`).

Every mode decodes greedily with stop rule "none" on the same prompts, so each generates
the target's own tokens up to end-of-text or the budget, and only the speed differs. Modes
are interleaved per prompt (the order rotates) and timed end to end with cold KV caches;
tokens/s after the prefill ("decode") is reported too, since the server reuses the prompt's
cache across keystrokes. Output: DIR/results.json (`summary` first), DIR/results.md,
DIR/speedup_by_class.png, DIR/k_trace.png.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from lsp_server.bench.engine_bench import TIE_TOLERANCE, tie_margin
from lsp_server.bench.policy_prompts import BOILERPLATE, CLASSES, HIGH_ENTROPY, ClassSpot, build_prompt_set
from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json
from lsp_server.engine.types import DraftPolicy, StopRule, common_prefix_len

MODES = ("target", "fixed-2", "fixed-4", "fixed-8", "heuristic", "confidence", "lookup", "policy")
FIXED = ("fixed-2", "fixed-4", "fixed-8")
# The targets: reported against, never asserted.
TARGETS = {"policy_vs_best_fixed": 1.10, "high_entropy_vs_plain": 0.95,
           "boilerplate_speedup_vs_target": 2.5}

# Only for the printed duration estimate, never for results: rough costs of the default
# pair with bf16 weights on 2 threads. Speculative modes are guessed at these multiples of
# plain decoding speed.
TARGET_STEP_S = 0.16
TARGET_PREFILL_TOKENS_PER_S = 210.0
DRAFT_PREFILL_TOKENS_PER_S = 530.0
SPEEDUP_GUESS = {"target": 1.0, "lookup": 1.2}
DEFAULT_SPEEDUP_GUESS = 1.6


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="bench-results/policy")
    p.add_argument("--per-class", type=int, default=4, help="spots per context class")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--classes", default=",".join(CLASSES), help="comma-separated subset of " + ",".join(CLASSES))
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--seed", type=int, default=0, help="which spots are cut")
    # A short prefix window keeps the full run within ~25 minutes on 2 cores; the server's
    # default is 1024 (every cold run prefills the whole prompt on both models).
    p.add_argument("--prefix-tokens", type=int, default=256)
    p.add_argument("--suffix-tokens", type=int, default=64)
    p.add_argument("--policy-memory", choices=["warm", "cold"], default="warm",
                   help="warm: the policy mode keeps per-context acceptance across prompts, as "
                        "the server does; cold: every run starts from the table")
    p.add_argument("--target", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--quant", default="auto", help="target weights: auto (the server's: gguf on the native kernels where they run and the model has a GGUF file, else bf16) | gguf | bf16 (model.quant)")
    p.add_argument("--draft-quant", default="auto", help="draft weights (model.draftQuant)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="threads of the matrix products (0: every CPU)")


def mode_policy(mode: str, max_new_tokens: int, policy_for_spot: DraftPolicy) -> DraftPolicy:
    """The DraftPolicy a mode runs with. `policy_for_spot` is the syntax policy's answer for
    the spot (used by the `policy` mode only). Baselines switch off everything but the
    strategy they measure: no confidence stop, no entropy fallback, no prompt lookup."""
    none = StopRule("none")
    if mode == "policy":
        return replace(policy_for_spot, stop=none, max_new_tokens=max_new_tokens)
    base = DraftPolicy(context=f"bench-{mode}", k_init=4, k_min=1, k_max=8, max_new_tokens=max_new_tokens,
                       stop=none, draft_p_min=0.0, entropy_high=0.0, mode="fixed", prompt_lookup=False)
    if mode == "target":
        return replace(base, mode="off")
    if mode in FIXED:
        k = int(mode.split("-")[1])
        return replace(base, k_init=k, k_min=k, k_max=k)
    if mode == "heuristic":  # +2 after a fully accepted round, -1 otherwise
        return replace(base, mode="adaptive")
    if mode == "confidence":  # k up to 8, each round cut where the draft's top-1 p < 0.5
        return replace(base, k_init=8, k_min=8, k_max=8, draft_p_min=0.5)
    if mode == "lookup":  # n-gram prompt lookup alone; no match -> a plain round
        return replace(base, k_init=8, k_min=8, k_max=8, prompt_lookup=True, model_draft=False)
    raise ValueError(f"unknown mode {mode!r}: choose from {', '.join(MODES)}")


# ---------------------------------------------------------------------------------------
# Summary math (pure: rows in, numbers out).


def _totals(rows: Sequence[dict], mode: str) -> dict[str, float]:
    runs = [r[mode] for r in rows if mode in r]
    stats = [run["stats"] for run in runs]
    return {
        "runs": len(runs),
        "tokens": sum(run["n"] for run in runs),
        "seconds": sum(run["seconds"] for run in runs),
        "decode_tokens": sum(max(run["n"] - 1, 0) for run in runs),
        "decode_seconds": sum(run["seconds"] - s["prefill_s"] for run, s in zip(runs, stats)),
        "drafted": sum(s["drafted"] for s in stats),
        "accepted": sum(s["accepted"] for s in stats),
        "rounds": sum(s["rounds"] for s in stats),
        "plain_rounds": sum(s["plain_rounds"] for s in stats),
        "speculative_rounds": sum(s["speculative_rounds"] for s in stats),
    }


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def mode_rates(rows: Sequence[dict], mode: str) -> dict[str, Any]:
    t = _totals(rows, mode)
    return {
        "runs": t["runs"],
        "tokens": t["tokens"],
        "tokens_per_s": _div(t["tokens"], t["seconds"]),
        "decode_tokens_per_s": _div(t["decode_tokens"], t["decode_seconds"]),
        "acceptance_rate": _div(t["accepted"], t["drafted"]),
        "mean_accepted_per_round": _div(t["accepted"], t["speculative_rounds"]),
        "plain_round_share": _div(t["plain_rounds"], t["rounds"]),
    }


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    if not a or not b or a.get(key) is None or not b.get(key):
        return None
    return a[key] / b[key]


def headline(rows: Sequence[dict], modes: Sequence[str], key: str) -> dict[str, Any]:
    """The issue's three ratios, on tokens/s measured as `key`."""
    overall = {m: mode_rates(rows, m) for m in modes}
    fixed = [m for m in FIXED if m in modes and overall[m][key]]
    best = max(fixed, key=lambda m: overall[m][key]) if fixed else None
    prose = [r for r in rows if r["label"] == HIGH_ENTROPY]
    boiler = [r for r in rows if r["label"] in BOILERPLATE]

    def on(subset: Sequence[dict], mode: str) -> dict | None:
        return mode_rates(subset, mode) if subset and mode in modes else None

    return {
        "best_fixed": best,
        "policy_vs_best_fixed": _ratio(overall.get("policy"), overall.get(best), key) if best else None,
        "high_entropy_vs_plain": _ratio(on(prose, "policy"), on(prose, "target"), key),
        "boilerplate_speedup_vs_target": _ratio(on(boiler, "policy"), on(boiler, "target"), key),
    }


def summarize(rows: Sequence[dict], modes: Sequence[str]) -> dict[str, Any]:
    classes = [c for c in CLASSES if any(r["label"] == c for r in rows)]
    per_class: dict[str, dict[str, dict]] = {}
    for c in classes:
        subset = [r for r in rows if r["label"] == c]
        table = {m: mode_rates(subset, m) for m in modes}
        for m in modes:
            table[m]["speedup_vs_target"] = _ratio(table[m], table.get("target"), "tokens_per_s")
        per_class[c] = table
    end_to_end = headline(rows, modes, "tokens_per_s")
    summary: dict[str, Any] = {"prompts": len(rows), **end_to_end}
    summary["decode"] = headline(rows, modes, "decode_tokens_per_s")
    summary["targets"] = {
        key: {"target": goal, "value": end_to_end[key],
              "met": None if end_to_end[key] is None else end_to_end[key] >= goal,
              "decode_value": summary["decode"][key]}
        for key, goal in TARGETS.items()}
    summary["tokens_per_s"] = {m: mode_rates(rows, m)["tokens_per_s"] for m in modes}
    summary["per_class"] = per_class
    summary["classifier"] = {
        c: {"agreement": sum(r["agrees"] for r in rows if r["label"] == c)
            / sum(1 for r in rows if r["label"] == c),
            "kinds": dict(Counter(r["classified"] for r in rows if r["label"] == c))}
        for c in classes}
    if "target" in modes:
        summary["identical_to_target_rate"] = {
            m: sum(r[m]["tokens"] == r["target"]["tokens"] for r in rows) / len(rows)
            for m in modes if m != "target" and rows}
        summary["identical_up_to_near_ties_rate"] = {
            m: sum(r[m]["tokens"] == r["target"]["tokens"]
                   or r.get("divergence_margins", {}).get(m, float("inf")) < TIE_TOLERANCE for r in rows) / len(rows)
            for m in modes if m != "target" and rows}
    return summary


def estimate_seconds(prompt_tokens: Sequence[int], new_tokens: Sequence[int], modes: Sequence[str]) -> float:
    """Seconds for every spot x mode on the default pair (cost model above)."""
    total = 0.0
    for prompt, new in zip(prompt_tokens, new_tokens):
        for mode in modes:
            total += prompt / TARGET_PREFILL_TOKENS_PER_S
            if mode not in ("target", "lookup"):
                total += prompt / DRAFT_PREFILL_TOKENS_PER_S
            total += new * TARGET_STEP_S / SPEEDUP_GUESS.get(mode, DEFAULT_SPEEDUP_GUESS)
    return total


# ---------------------------------------------------------------------------------------
# Running.


class Runner:
    """Runs one mode on one spot's prompt, with cold caches and a controlled memory."""

    def __init__(self, runtime: Any, args: argparse.Namespace):
        from lsp_server.engine.controller import AcceptanceMemory

        self.engine = runtime.engine
        self.max_new = args.max_new_tokens
        self.new_memory = AcceptanceMemory
        self.policy_memory = AcceptanceMemory()
        self.warm = args.policy_memory == "warm"

    def run(self, mode: str, spot: ClassSpot, ids: list[int]) -> dict[str, Any]:
        from lsp_server.engine.types import CompletionRequest
        from lsp_server.syntax.policy import policy_for

        policy = mode_policy(mode, self.max_new, policy_for(spot.context))
        # Baselines start every prompt from their own k; only the syntax policy may learn
        # per context across prompts, as it does in the server.
        keep = mode == "policy" and self.warm
        self.engine.memory = self.policy_memory if keep else self.new_memory()
        self.engine.clear_caches()
        t = time.perf_counter()
        final = list(self.engine.generate(CompletionRequest(f"{mode}:{spot.name}", tuple(ids), policy)))[-1]
        elapsed = time.perf_counter() - t
        stats = final.stats.to_dict()
        stats["accepted_lengths"] = list(final.stats.accepted_lengths)
        return {"tokens": list(final.token_ids), "n": len(final.token_ids), "seconds": elapsed,
                "tokens_per_s": len(final.token_ids) / elapsed if elapsed else 0.0,
                "reason": final.reason, "text": final.text, "policy": _policy_dict(policy), "stats": stats}

    def divergence_margins(self, ids: list[int], row: dict[str, Any], modes: Sequence[str]) -> dict[str, float]:
        """For each mode whose output differs from the target alone: the target's top-1
        minus top-2 logit where they part (where one stopped and the other went on, when
        one output is a prefix of the other)."""
        reference = row["target"]["tokens"]
        return {mode: tie_margin(self.engine.target, ids, reference[:common_prefix_len(row[mode]["tokens"], reference)])
                for mode in modes if mode != "target" and row[mode]["tokens"] != reference}


def _policy_dict(p: DraftPolicy) -> dict[str, Any]:
    return {"context": p.context, "mode": p.mode, "k": [p.k_init, p.k_min, p.k_max],
            "p_min": p.draft_p_min, "entropy": [p.entropy_high, p.entropy_low],
            "lookup": p.prompt_lookup, "model_draft": p.model_draft}


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _split(value: str, allowed: Sequence[str], what: str) -> list[str]:
    chosen = [v for v in value.split(",") if v]
    unknown = [v for v in chosen if v not in allowed]
    if unknown or not chosen:
        given = ", ".join(unknown) or "(none given)"
        raise SystemExit(f"unknown {what}: {given}; choose from {', '.join(allowed)}")
    return chosen


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from lsp_server.bench.loading import bench_model, load_bench_runtime
    from lsp_server.context.prompt import ContextBudget, build_fim_prompt

    modes = _split(args.modes, MODES, "modes")
    classes = _split(args.classes, CLASSES, "classes")
    spots = build_prompt_set(args.per_class, classes, args.seed)
    runtime, threads = load_bench_runtime(bench_model(vars(args)), args.threads)
    budget = ContextBudget(args.prefix_tokens, args.suffix_tokens)
    prompts = [build_fim_prompt(s.prefix, s.suffix, runtime.encode, runtime.fim, budget, "psm").ids
               for s in spots]
    lengths = [len(p) for p in prompts]
    likely = estimate_seconds(lengths, [min(args.max_new_tokens, len(runtime.encode(s.expected)) + 1)
                                        for s in spots], modes)
    most = estimate_seconds(lengths, [args.max_new_tokens] * len(spots), modes)
    print(f"{len(spots)} spots x {len(modes)} modes. Expected duration for the default pair in bf16 on a "
          f"quiet machine: ~{_duration(likely)} if completions are as long as the removed text, at most "
          f"~{_duration(most)} at the full token budget. Load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs: other work slows every mode several times over.", flush=True)
    runner = Runner(runtime, args)
    out_dir = Path(args.out)
    info = {"machine": machine_info(), "args": plain_args(args), "threads": threads, "modes": modes, "classes": classes,
            "spots": [s.to_dict() for s in spots]}
    rows: list[dict[str, Any]] = []
    for i, (spot, ids) in enumerate(zip(tqdm(spots, desc="spots", unit="spot"), prompts)):
        row: dict[str, Any] = {**spot.to_dict(), "prompt_tokens": len(ids)}
        for mode in modes[i % len(modes):] + modes[: i % len(modes)]:  # rotate: no mode always first
            row[mode] = runner.run(mode, spot, ids)
        if "target" in modes:
            row["divergence_margins"] = runner.divergence_margins(ids, row, modes)
        rows.append(row)
        write_json(out_dir / "results.json", {"summary": summarize(rows, modes), **info, "rows": rows})
    summary = summarize(rows, modes)
    info["machine"]["load_average_at_end"] = os.getloadavg()
    info["policy_memory"] = runner.policy_memory.snapshot()
    write_json(out_dir / "results.json", {"summary": summary, **info, "rows": rows})
    write_report(out_dir, summary, rows, modes, args)
    print((out_dir / "results.md").read_text())
    return 0


# ---------------------------------------------------------------------------------------
# Report and plots.


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "not met"


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def speedup_table(summary: dict, rows: Sequence[dict], modes: Sequence[str], key: str) -> tuple[list, list]:
    """Rows = classes (+ all), columns = modes' tokens/s (as `key`) relative to target."""
    tables = dict(summary["per_class"])
    tables["all"] = {m: mode_rates(rows, m) for m in modes}
    body = [[c, *(_ratio(t[m], t.get("target"), key) for m in modes)] for c, t in tables.items()]
    return ["class", *modes], body


def write_report(out_dir: Path, summary: dict, rows: Sequence[dict], modes: Sequence[str], args: Any) -> None:
    lines = ["# specfill bench policy\n",
             f"{len(rows)} spots ({args.per_class} per class, seed {args.seed}), {args.max_new_tokens} new "
             f"tokens, greedy, stop rule none, dtype {args.dtype}, prefix/suffix window "
             f"{args.prefix_tokens}/{args.suffix_tokens} tokens, policy memory {args.policy_memory}.\n",
             "## Speedup vs target alone, end to end (cold caches, prefill included)\n",
             markdown_table(*speedup_table(summary, rows, modes, "tokens_per_s")),
             "## Speedup vs target alone, after the prefill\n",
             markdown_table(*speedup_table(summary, rows, modes, "decode_tokens_per_s")),
             "## The issue's targets (reported, not asserted)\n"]
    for key, t in summary["targets"].items():
        lines.append(f"- {key}: {_fmt(t['value'])} end to end, {_fmt(t['decode_value'])} after the "
                     f"prefill (target >= {t['target']}; {_verdict(t['met'])})")
    lines.append(f"- best fixed k: {summary['best_fixed']} "
                 f"(after the prefill: {summary['decode']['best_fixed']})\n")
    if "policy" in modes:
        lines.append("## The policy mode per class\n")
        lines.append(markdown_table(
            ["class", "tokens/s", "acceptance", "accepted/round", "plain rounds"],
            [[c, *(t["policy"][k] for k in ("tokens_per_s", "acceptance_rate", "mean_accepted_per_round",
                                            "plain_round_share"))] for c, t in summary["per_class"].items()]))
    lines.append("## classify() on the spots (label from the source structure)\n")
    lines.append(markdown_table(["class", "agreement", "classify() kinds"],
                                [[c, v["agreement"], ", ".join(f"{k} {n}" for k, n in v["kinds"].items())]
                                 for c, v in summary["classifier"].items()]))
    if "identical_to_target_rate" in summary:
        same = ", ".join(f"{m} {v:.2f}" for m, v in summary["identical_to_target_rate"].items())
        lines.append(f"Output identical to target alone: {same}\n")
    if "identical_up_to_near_ties_rate" in summary:
        same = ", ".join(f"{m} {v:.2f}" for m, v in summary["identical_up_to_near_ties_rate"].items())
        lines.append(f"... or parting only where the target's top-2 logits are within {TIE_TOLERANCE} "
                     f"(bf16 near-ties: a k-token verify and a 1-token step round differently): {same}\n")
    (out_dir / "results.md").write_text("\n".join(lines))
    headers, body = speedup_table(summary, rows, modes, "tokens_per_s")
    grouped_bar_plot(out_dir / "speedup_by_class.png", [r[0] for r in body],
                     {m: [r[i + 1] for r in body] for i, m in enumerate(modes) if m != "target"},
                     "tokens/s vs target alone", "Speedup over plain decoding by context class (end to end)")
    if "policy" in modes and rows:
        longest = max(rows, key=lambda r: r["policy"]["n"])
        k_trace_plot(out_dir / "k_trace.png", longest["policy"]["stats"],
                     f"policy mode, {longest['label']} spot {longest['name']} ({longest['policy']['n']} tokens)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bar_plot(path: Path, groups: Sequence[str], series: dict[str, list], ylabel: str, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 * len(groups) * max(1, len(series)) / 4), 4.0))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v or 0.0 for v in values], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def round_trace(stats: dict) -> tuple[list[int], list[int | None]]:
    """k and accepted draft tokens per round; plain rounds are k = 0 with nothing accepted."""
    ks = list(stats["k_trace"])
    accepted = iter(stats["accepted_lengths"])
    return ks, [next(accepted) if k else None for k in ks]


def k_trace_plot(path: Path, stats: dict, title: str) -> None:
    plt = _pyplot()
    ks, accepted = round_trace(stats)
    rounds = range(1, len(ks) + 1)
    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.step(rounds, ks, where="mid", color="#4c72b0", label="k drafted")
    ax.plot([r for r, a in zip(rounds, accepted) if a is not None], [a for a in accepted if a is not None],
            "o", color="#55a868", markersize=4, label="accepted")
    plain = [r for r, k in zip(rounds, ks) if k == 0]
    ax.plot(plain, [0] * len(plain), "x", color="#c44e52", label="plain round (k = 0)")
    ax.set_xlabel("round")
    ax.set_ylabel("tokens")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
