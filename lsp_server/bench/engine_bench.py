"""`specfill bench engine`: specfill's loop vs the target alone and transformers' generate().

All modes run on the same loaded models, interleaved per prompt (the order rotates), each
timed end to end including prefill with cold caches, greedy, stopping at end-of-text or
the token budget. Output: DIR/results.json (`summary` first), DIR/results.md, PNG plots.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lsp_server.bench.datasets import load_prompts
from lsp_server.bench.report import (bar_plot, histogram_plot, machine_info, markdown_table, median,
                                     plain_args, write_json)
from lsp_server.engine.types import common_prefix_len

MODES = ("target", "hf-plain", "hf-assisted-4", "hf-assisted-default", "specfill")
# In bf16 the k-token verify and the 1-token step round differently; a divergence is
# accepted as a near-tie only where the target's top-2 logits are closer than this.
TIE_TOLERANCE = 0.5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", choices=["humaneval", "stdlib-fim"], default="humaneval")
    p.add_argument("--limit", type=int, default=40)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default="bench-results/engine")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--target", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--quant", default="auto", help="target weights: auto (the server's: gguf on the native kernels where they run and the model has a GGUF file, else bf16) | gguf | bf16 (model.quant)")
    p.add_argument("--draft-quant", default="auto", help="draft weights (model.draftQuant)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="threads of the matrix products (0: every CPU)")
    p.add_argument("--k", type=int, default=4, help="specfill's initial k")
    p.add_argument("--k-max", type=int, default=12)
    p.add_argument("--p-min", type=float, default=0.7, help="draft confidence stop")
    p.add_argument("--no-lookup", action="store_true")


def bench_policy(args: argparse.Namespace):
    from lsp_server.engine.types import DraftPolicy, StopRule

    return DraftPolicy(context="bench", k_init=args.k, k_min=1, k_max=args.k_max,
                       max_new_tokens=args.max_new_tokens, stop=StopRule("none"),
                       draft_p_min=args.p_min, mode="adaptive", prompt_lookup=not args.no_lookup)


class Runner:
    """One place that knows how to run each mode on a prompt's token ids."""

    def __init__(self, runtime: Any, args: argparse.Namespace):
        import torch

        self.torch = torch
        self.rt = runtime
        self.engine = runtime.engine
        self.target = runtime.engine.target
        self.draft = runtime.engine.drafter.pool.model
        self.stop_ids = sorted(runtime.engine.stop_ids)
        self.policy = bench_policy(args)
        self.max_new = args.max_new_tokens
        self.default_assistant = dict(self.draft.generation_config.to_dict())

    def run(self, mode: str, ids: list[int], max_new: int | None = None) -> dict[str, Any]:
        max_new = max_new or self.max_new
        t = time.perf_counter()
        if mode in ("target", "specfill"):
            out, stats = self._ours(ids, mode, max_new)
        else:
            out, stats = self._hf(ids, mode, max_new), None
        elapsed = time.perf_counter() - t
        row = {"tokens": out, "n": len(out), "seconds": elapsed,
               "tokens_per_s": len(out) / elapsed if elapsed else 0.0}
        if stats is not None:
            row["stats"] = stats.to_dict()
            row["stats"]["accepted_lengths"] = list(stats.accepted_lengths)
            row["stats"]["token_times_s"] = list(stats.token_times_s)
        return row

    def _ours(self, ids: list[int], mode: str, max_new: int):
        from lsp_server.engine.types import CompletionRequest

        self.engine.clear_caches()  # cold, like the transformers runs
        policy = replace(self.policy, max_new_tokens=max_new)
        # The target alone under its own context: the engine learns answer lengths per
        # context (to judge a draft's catch-up), and must not learn them from the run it
        # is compared with.
        policy = policy if mode == "specfill" else replace(policy, mode="off", context="bench-target")
        final = list(self.engine.generate(CompletionRequest(mode, tuple(ids), policy)))[-1]
        return list(final.token_ids), final.stats

    def _hf(self, ids: list[int], mode: str, max_new: int) -> list[int]:
        torch = self.torch
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new, do_sample=False,
                                      eos_token_id=self.stop_ids, pad_token_id=self.stop_ids[0])
        if mode.startswith("hf-assisted"):
            # transformers keeps the draft length it learned in the draft's generation
            # config across calls; reset it so every prompt starts from the same setting.
            self.draft.generation_config.num_assistant_tokens = self.default_assistant.get(
                "num_assistant_tokens", 20)
            kwargs["assistant_model"] = self.draft
            if mode == "hf-assisted-4":
                kwargs.update(num_assistant_tokens=4, num_assistant_tokens_schedule="constant",
                              assistant_confidence_threshold=0.0)
        with torch.inference_mode():
            out = self.target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), **kwargs)
        new = out[0, len(ids):].tolist()
        return [t for t in new[: next((i for i, t in enumerate(new) if t in self.stop_ids), len(new))]]


def tie_margin(target: Any, ids: list[int], common: list[int]) -> float:
    """The target's top-1 minus top-2 logit after `ids + common`: where two outputs that
    share `common` part ways. Below TIE_TOLERANCE, bf16 rounding alone can flip the pick."""
    import torch

    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([ids + common])).logits[0, -1].float()
    top2 = logits.topk(2).values
    return float(top2[0] - top2[1])


def summarize(rows: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    tps = {}
    for mode in modes:
        tokens = sum(r[mode]["n"] for r in rows)
        seconds = sum(r[mode]["seconds"] for r in rows)
        tps[mode] = tokens / seconds if seconds else 0.0
    summary: dict[str, Any] = {"prompts": len(rows), "tokens_per_s": tps}

    def ratio(a: str, b: str) -> float | None:
        return tps[a] / tps[b] if a in tps and b in tps and tps[b] else None

    summary["speedup_vs_target"] = ratio("specfill", "target")
    hf = [m for m in ("hf-assisted-4", "hf-assisted-default") if m in tps]
    if hf and "specfill" in tps:
        best = max(hf, key=lambda m: tps[m])
        summary["best_hf_assisted"] = best
        summary["speedup_vs_hf_assisted"] = ratio("specfill", best)
    summary["speedup_vs_hf_plain"] = ratio("specfill", "hf-plain")
    if "specfill" in modes and "target" in modes:
        summary["median_prompt_speedup_vs_target"] = median(
            [r["specfill"]["tokens_per_s"] / r["target"]["tokens_per_s"] for r in rows
             if r["target"]["tokens_per_s"]])
        same = [r["identical"] for r in rows]
        ties = [r["identical"] or r.get("near_tie", False) for r in rows]
        summary["identical_rate"] = sum(same) / len(same) if same else None
        summary["identical_rate_up_to_near_ties"] = sum(ties) / len(ties) if ties else None
        stats = [r["specfill"]["stats"] for r in rows]
        drafted = sum(s["drafted"] for s in stats)
        accepted = sum(s["accepted"] for s in stats)
        spec_rounds = sum(s["speculative_rounds"] for s in stats)
        summary["acceptance_rate"] = accepted / drafted if drafted else 0.0
        summary["mean_accepted_per_round"] = accepted / spec_rounds if spec_rounds else 0.0
        summary["mean_tokens_per_round"] = (
            sum(s["generated_tokens"] for s in stats) / max(1, sum(s["rounds"] for s in stats)))
        by_drafter: dict[str, dict[str, float]] = {}
        for s in stats:
            for name, d in s["drafters"].items():
                row = by_drafter.setdefault(name, {"drafted": 0, "accepted": 0, "rounds": 0, "time_s": 0.0})
                for key in row:
                    row[key] += d[key]
        summary["drafters"] = by_drafter
        summary["draft_s"] = sum(s["draft_s"] for s in stats)
        summary["verify_s"] = sum(s["verify_s"] for s in stats)
        summary["prefill_s"] = sum(s["prefill_s"] for s in stats)
        summary["draft_skipped"] = sum(s.get("draft_skipped", False) for s in stats)
    if "hf-plain" in modes and "target" in modes:
        summary["target_matches_hf_plain_rate"] = sum(
            r["target"]["tokens"] == r["hf-plain"]["tokens"] for r in rows) / len(rows)
    return summary


def run(args: argparse.Namespace) -> int:
    from lsp_server.backends.local_runtime import describe_costs
    from lsp_server.bench.loading import bench_model, load_bench_runtime
    from lsp_server.context.prompt import ContextBudget, build_fim_prompt

    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes: {', '.join(sorted(unknown))}")
    runtime, threads = load_bench_runtime(bench_model(vars(args)), args.threads)
    runner = Runner(runtime, args)
    out_dir = Path(args.out)
    prompts = load_prompts(args.prompts, args.limit)
    info = {"machine": machine_info(), "args": plain_args(args), "threads": threads, "modes": modes,
            "policy": repr(runner.policy), "tie_tolerance": TIE_TOLERANCE}
    rows: list[dict[str, Any]] = []
    from tqdm import tqdm

    # Untimed warm-up of every mode: the first forward pages the memory-mapped weights in
    # and builds kernels' caches; without it the first mode of the first prompt pays that.
    warm_ids = build_fim_prompt(prompts[0].prefix, prompts[0].suffix, runtime.encode,
                                runtime.fim, ContextBudget(), "psm").ids
    for mode in modes:
        runner.run(mode, warm_ids, max_new=8)
    with runtime.engine.memory.lock:  # the warm-up's 8-token answers say nothing of the prompts'
        runtime.engine.memory.lengths.clear()

    for i, prompt in enumerate(tqdm(prompts, desc="prompts", unit="prompt")):
        ids = build_fim_prompt(prompt.prefix, prompt.suffix, runtime.encode, runtime.fim,
                               ContextBudget(), "psm").ids
        row: dict[str, Any] = {"name": prompt.name, "prompt_tokens": len(ids)}
        order = modes[i % len(modes):] + modes[: i % len(modes)]  # rotate: no mode always first
        for mode in order:
            row[mode] = runner.run(mode, ids)
        if "specfill" in row and "target" in row:
            a, b = row["specfill"]["tokens"], row["target"]["tokens"]
            row["identical"] = a == b
            if a != b:
                n = common_prefix_len(a, b)
                row["divergence_at"] = n
                row["tie_margin"] = tie_margin(runner.target, ids, b[:n])
                row["near_tie"] = row["tie_margin"] < TIE_TOLERANCE
        rows.append(row)
        write_json(out_dir / "results.json", {"summary": summarize(rows, modes), **info, "rows": rows})
    summary = summarize(rows, modes)
    live = runtime.engine.live
    if live is not None:  # what decided k and whether to draft: the load's timings, as corrected
        summary["round_costs_at_load"] = describe_costs(live.measured)
        summary["round_costs_live"] = describe_costs(live.current)
    write_json(out_dir / "results.json", {"summary": summary, **info, "rows": rows})
    write_report(out_dir, summary, rows, modes, args)
    print((out_dir / "results.md").read_text())
    return 0


def write_report(out_dir: Path, summary: dict, rows: list[dict], modes: list[str], args) -> None:
    tps = summary["tokens_per_s"]
    base = tps.get("target") or None
    table = markdown_table(
        ["mode", "tokens/s", "x target alone"],
        [[m, tps[m], tps[m] / base if base else None] for m in modes])
    keys = ["speedup_vs_target", "speedup_vs_hf_assisted", "best_hf_assisted", "identical_rate",
            "identical_rate_up_to_near_ties", "acceptance_rate", "mean_accepted_per_round",
            "mean_tokens_per_round", "draft_skipped", "target_matches_hf_plain_rate",
            "round_costs_at_load", "round_costs_live"]
    facts = "\n".join(f"- {k}: {summary[k]:.3f}" if isinstance(summary.get(k), float)
                      else f"- {k}: {summary.get(k)}" for k in keys if k in summary)
    header = (f"# specfill bench engine\n\n{args.prompts}, {len(rows)} prompts, "
              f"{args.max_new_tokens} new tokens, greedy, dtype {args.dtype}, weights {args.quant}/{args.draft_quant}\n\n")
    (out_dir / "results.md").write_text(header + table + "\n" + facts + "\n")
    bar_plot(out_dir / "tokens_per_s.png", modes, [tps[m] for m in modes], "tokens/s",
             f"{args.prompts}: tokens/s by mode ({len(rows)} prompts)")
    if "specfill" in modes:
        lengths = [n for r in rows for n in r["specfill"]["stats"]["accepted_lengths"]]
        histogram_plot(out_dir / "accepted_lengths.png", lengths, "draft tokens accepted in a round",
                       "specfill: accepted length per speculative round")
