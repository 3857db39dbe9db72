"""`specfill bench bound`: the fastest speculation could be on a benchmark's prompts, with
this model pair on this machine, whatever the draft-length controller decides.

It reads a finished `bench engine` or `bench policy` run (its results.json: the settings,
the prompts, the target's own greedy output and its prefill times) and then:

1. walks the real draft along the target's output one token at a time, as a proposal
   does, and records at every position how many of the next tokens it gets right (its
   greedy run); the same for prompt lookup, from the text so far;
2. times, on the loaded models, the target's feeds of 1 to k_max+1 rows (a plain step and
   verifies) and the draft's one-token step;
3. finds the fastest schedule of plain, draft and lookup rounds that knows every run in
   advance (dynamic programming over positions, `best_schedule`). A real controller only
   sees confidences, so none can beat it under these costs. Fixed-k rounds are simulated
   with the same costs to show how close the cost model comes to the measured run.

Target alone is simulated as prefill + one plain step per token, and a plain step costs
what it cost in the source run (its target-alone decoding time per token: the engine's whole
round, and the steady state of back-to-back one-row steps, which a timing of isolated feeds
here overstated by ~13 %); every speculative schedule adds the draft's prefill.
Output: DIR/results.json (`summary` first), DIR/results.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json

FIXED_K = (2, 4, 8)


@dataclass(frozen=True)
class Costs:
    """Seconds: one plain target step, a target feed of r rows (r >= 1), one draft step."""

    plain: float
    verify: dict[int, float]
    draft_step: float

    def verify_s(self, rows: int) -> float:
        # Past the measured table: the largest measured row count (a lower bound).
        return self.verify.get(rows, self.verify[max(self.verify)])


def run_lengths(hits: Sequence[bool]) -> list[int]:
    """hits[i]: the draft's guess at position i is right -> runs[i]: how many guesses in a
    row are right from position i on."""
    runs = [0] * (len(hits) + 1)
    for i in range(len(hits) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if hits[i] else 0
    return runs[:-1]


def lookup_runs(prompt: Sequence[int], tokens: Sequence[int], k_max: int) -> list[int]:
    """At each position of `tokens`, how many tokens prompt lookup would propose right
    (its proposal from prompt + tokens so far, compared with what the target wrote)."""
    from lsp_server.engine.drafters import PromptLookupDrafter

    lookup = PromptLookupDrafter()
    runs = []
    for i in range(len(tokens)):
        draft, _ = lookup.propose(list(prompt) + list(tokens[:i]), k_max)
        m = 0
        while m < len(draft.tokens) and i + m < len(tokens) and draft.tokens[m] == tokens[i + m]:
            m += 1
        runs.append(m)
    return runs


def best_schedule(draft_runs: Sequence[int], lookup: Sequence[int], costs: Costs, k_max: int) -> tuple[float, int]:
    """(seconds, rounds) of the fastest way to produce the tokens: at each position a plain
    step (1 token), k draft steps and a (k+1)-row verify (k+1 tokens, k <= the draft's run),
    or a lookup proposal of l tokens and an (l+1)-row verify (l <= lookup's run)."""
    n = len(draft_runs)
    best = [0.0] * (n + 1)
    rounds = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        options = [(costs.plain + best[i + 1], rounds[i + 1])]
        for k in range(1, min(draft_runs[i], k_max) + 1):
            j = min(i + k + 1, n)
            options.append((k * costs.draft_step + costs.verify_s(k + 1) + best[j], rounds[j]))
        for k in range(1, min(lookup[i], k_max) + 1):
            j = min(i + k + 1, n)
            options.append((costs.verify_s(k + 1) + best[j], rounds[j]))
        seconds, r = min(options)
        best[i], rounds[i] = seconds, r + 1
    return best[0], rounds[0]


def fixed_k_seconds(draft_runs: Sequence[int], k: int, costs: Costs) -> float:
    """Rounds of exactly k draft tokens (no confidence stop, no lookup)."""
    i, seconds = 0, 0.0
    while i < len(draft_runs):
        seconds += k * costs.draft_step + costs.verify_s(k + 1)
        i += min(draft_runs[i], k) + 1
    return seconds


def prompt_times(row: dict[str, Any], costs: Costs, k_max: int) -> dict[str, float]:
    """Simulated seconds for one prompt: target alone, the best schedule, fixed k."""
    prefill, both = row["target_prefill_s"], row["target_prefill_s"] + row["draft_prefill_s"]
    best, rounds = best_schedule(row["draft_runs"], row["lookup_runs"], costs, k_max)
    out = {"target": prefill + len(row["draft_runs"]) * costs.plain, "best": both + best,
           "best_decode": best, "target_decode": len(row["draft_runs"]) * costs.plain, "best_rounds": rounds}
    for k in fixed_ks(k_max):
        out[f"fixed-{k}"] = both + fixed_k_seconds(row["draft_runs"], k, costs)
    return out


def fixed_ks(k_max: int) -> tuple[int, ...]:
    """The fixed k simulated: those the best schedule may also use."""
    return tuple(k for k in FIXED_K if k <= k_max) or (k_max,)


def summarize(rows: Sequence[dict[str, Any]], costs: Costs, k_max: int) -> dict[str, Any]:
    """Per group ("all" and the rows' `group`): simulated and measured speedups over the
    target alone."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        times = prompt_times(row, costs, k_max)
        for group in ("all",) + tuple(row.get("groups", ())):
            groups[group].append({**times, "measured_target": row["measured_target_s"],
                                  "measured_spec": row["measured_spec_s"], "tokens": len(row["draft_runs"]),
                                  "draft_hits": sum(1 for r in row["draft_runs"] if r > 0)})
    table = {}
    ks = fixed_ks(k_max)
    for group, items in groups.items():
        total = {key: sum(item[key] for item in items) for key in items[0]}
        table[group] = {
            "prompts": len(items), "tokens": total["tokens"],
            "draft_hit_rate": total["draft_hits"] / total["tokens"] if total["tokens"] else None,
            "best_speedup": total["target"] / total["best"],
            "best_speedup_decode": total["target_decode"] / total["best_decode"],
            **{f"fixed-{k}_speedup": total["target"] / total[f"fixed-{k}"] for k in ks},
            "best_vs_best_fixed": min(total[f"fixed-{k}"] for k in ks) / total["best"],
            "measured_speedup": total["measured_target"] / total["measured_spec"],
            # what the measured run reached of the best possible (issue 50: make bench beside it)
            "share_of_best": total["best"] / total["measured_spec"],
            "best_tokens_per_s": total["tokens"] / total["best"],
            "measured_tokens_per_s": total["tokens"] / total["measured_spec"],
            "target_simulated_s": total["target"], "target_measured_s": total["measured_target"],
        }
    return {"groups": table, "fixed_k": list(ks), "costs": {"plain_s": costs.plain, "draft_step_s": costs.draft_step,
                                       "verify_s": {str(r): s for r, s in sorted(costs.verify.items())}}}


def source_plain_step(rows: Sequence[dict[str, Any]]) -> float:
    """Seconds per token of the source run's target alone after its prefills."""
    runs = [r["target"] for r in rows if r["target"]["n"]]
    decode = sum(r["seconds"] - r["stats"]["prefill_s"] for r in runs)
    return decode / sum(r["n"] for r in runs)


# ---------------------------------------------------------------------------------------
# Measuring on the real models.


def _source(path: str) -> dict[str, Any]:
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.exists():
        raise SystemExit(f"{p}: no results.json there; run `specfill bench engine` or `bench policy` first")
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{p}: cannot read it as a benchmark's results.json ({exc})") from None
    kind = data.get("args", {}).get("bench_command") if isinstance(data, dict) else None
    if kind not in ("engine", "policy") or not data.get("rows"):
        raise SystemExit(f"{p}: not a `bench engine` or `bench policy` result (bench_command={kind!r})")
    return data


def _prompts(runtime: Any, data: dict[str, Any]) -> list[tuple[list[int], list[str]]]:
    """(prompt ids, groups) for the source run's prompts, rebuilt the way it built them."""
    from lsp_server.context.prompt import ContextBudget, build_fim_prompt

    args = data["args"]
    if args["bench_command"] == "engine":
        from lsp_server.bench.datasets import load_prompts

        items, budget = [(p, []) for p in load_prompts(args["prompts"], args["limit"])], ContextBudget()
    else:
        from lsp_server.bench.policy_prompts import BOILERPLATE, build_prompt_set

        spots = build_prompt_set(args["per_class"], args["classes"].split(","), args["seed"])
        budget = ContextBudget(args["prefix_tokens"], args["suffix_tokens"])
        items = [(s, [s.label] + (["boilerplate"] if s.label in BOILERPLATE else [])) for s in spots]
    return [(build_fim_prompt(p.prefix, p.suffix, runtime.encode, runtime.fim, budget, "psm").ids, groups)
            for p, groups in items]


def _walk_draft(engine: Any, ids: list[int], tokens: list[int], step_times: list[float]) -> tuple[list[bool], float]:
    """The draft's greedy guess at every position of `tokens` given the target's text so
    far (hits), fed one token at a time from a cold cache; returns (hits, prefill seconds)."""
    import torch

    drafter = engine.drafter
    drafter.begin(ids)
    drafter.slot.reset()
    t = time.perf_counter()
    drafter.prefill(ids, 0, lambda: False)
    prefill_s = time.perf_counter() - t
    hits = []
    logits = drafter.slot.feed([ids[-1]], all_logits=False)[-1]
    for j, token in enumerate(tokens):
        hits.append(int(torch.argmax(logits)) == token)
        if j + 1 == len(tokens):
            break
        if drafter.head is not None:
            drafter.head.include([token])
        t = time.perf_counter()
        logits = drafter.slot.feed([token], all_logits=False)[-1]
        step_times.append(time.perf_counter() - t)
    return hits, prefill_s


def _verify_costs(engine: Any, samples: Sequence[tuple[list[int], list[int]]], k_max: int, reps: int) -> dict[int, float]:
    """Median seconds of a target feed of r rows (1..k_max+1) after each sample prompt."""
    slot = engine.pool.acquire([])
    times: dict[int, list[float]] = defaultdict(list)
    for ids, tokens in samples:
        slot.reset()
        slot.extend(ids, 0, None)
        feed = (tokens * (k_max + 2))[: k_max + 1] or [ids[-1]] * (k_max + 1)
        for _ in range(reps):
            for rows in range(1, k_max + 2):
                slot.rewind(len(ids))
                t = time.perf_counter()
                int(slot.feed(feed[:rows], all_logits=True).argmax(-1)[-1])
                times[rows].append(time.perf_counter() - t)
    slot.reset()
    return {rows: statistics.median(ts) for rows, ts in times.items()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="source", required=True,
                   help="results.json (or its folder) of a `bench engine` or `bench policy` run")
    p.add_argument("--out", default="bench-results/bound")
    p.add_argument("--limit", type=int, default=0, help="only the first N prompts (0: all)")
    p.add_argument("--k-max", type=int, default=12, help="most draft tokens a round may verify")
    p.add_argument("--cost-prompts", type=int, default=4, help="prompts to time the target's feeds after")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="threads of the matrix products (0: every CPU)")


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from lsp_server.bench.loading import bench_model, load_bench_runtime

    data = _source(args.source)
    src = data["args"]
    spec_mode = "specfill" if src["bench_command"] == "engine" else "policy"
    runtime, threads = load_bench_runtime(bench_model(src), args.threads)
    engine = runtime.engine
    if engine.drafter is None:
        raise SystemExit("the source run's settings load no draft model: nothing to bound")
    prompts = _prompts(runtime, data)
    source_rows = data["rows"][: args.limit or None]
    rows, step_times = [], []
    with torch.inference_mode():
        for (ids, groups), src_row in zip(tqdm(prompts[: len(source_rows)], desc="prompts", unit="prompt"), source_rows):
            if len(ids) != src_row["prompt_tokens"]:
                raise SystemExit(f"{src_row['name']}: the prompt has {len(ids)} tokens here and "
                                 f"{src_row['prompt_tokens']} in the source run (different data or settings)")
            tokens = src_row["target"]["tokens"]
            if not tokens:
                continue
            hits, draft_prefill = _walk_draft(engine, ids, tokens, step_times)
            rows.append({"name": src_row["name"], "groups": groups, "tokens": len(tokens),
                         "draft_runs": run_lengths(hits), "lookup_runs": lookup_runs(ids, tokens, args.k_max),
                         "target_prefill_s": src_row["target"]["stats"]["prefill_s"], "draft_prefill_s": draft_prefill,
                         "measured_target_s": src_row["target"]["seconds"],
                         "measured_spec_s": src_row[spec_mode]["seconds"]})
        samples = [(ids, r["target"]["tokens"]) for (ids, _), r in zip(prompts, source_rows)][: args.cost_prompts]
        verify = _verify_costs(engine, samples, args.k_max, args.reps)
    costs = Costs(plain=source_plain_step(source_rows), verify=verify, draft_step=statistics.median(step_times))
    summary = summarize(rows, costs, args.k_max)
    out_dir = Path(args.out)
    info = {"machine": machine_info(), "args": plain_args(args), "threads": threads, "source_args": src,
            "spec_mode": spec_mode}
    write_json(out_dir / "results.json", {"summary": summary, **info, "rows": rows})
    write_report(out_dir, summary, spec_mode, args)
    print((out_dir / "results.md").read_text())
    return 0


def write_report(out_dir: Path, summary: dict[str, Any], spec_mode: str, args: argparse.Namespace) -> None:
    groups, ks = summary["groups"], summary["fixed_k"]
    table = markdown_table(
        ["group", "prompts", "tokens", "draft right", "best possible", "best, after prefill",
         *[f"fixed-{k} (simulated)" for k in ks], f"measured {spec_mode}", f"{spec_mode}'s share of the best",
         "best / best fixed", "best tokens/s", f"measured {spec_mode} tokens/s"],
        [[g, v["prompts"], v["tokens"], v["draft_hit_rate"], v["best_speedup"], v["best_speedup_decode"],
          *[v[f"fixed-{k}_speedup"] for k in ks], v["measured_speedup"], f"{v['share_of_best']:.0%}",
          v["best_vs_best_fixed"], v["best_tokens_per_s"], v["measured_tokens_per_s"]]
         for g, v in groups.items()])
    c = summary["costs"]
    verify = ", ".join(f"{r}: {s * 1e3:.0f}" for r, s in c["verify_s"].items())
    text = (f"# specfill bench bound\n\nFrom `{args.source}`. Speedups over the target alone, end to end "
            f"(cold prefill) unless marked; simulated with the costs below, except the measured column "
            f"(the source run's own).\n\n{table}\n"
            f"Costs measured here: draft step {c['draft_step_s'] * 1e3:.1f} ms; target feed by rows (ms): {verify}.\n"
            f"A plain step: {c['plain_s'] * 1e3:.1f} ms, the source run's target-alone time per token after "
            f"its prefills (target alone simulated {groups['all']['target_simulated_s']:.1f} s, measured "
            f"{groups['all']['target_measured_s']:.1f} s).\n")
    (out_dir / "results.md").write_text(text)
