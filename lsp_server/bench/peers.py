"""`specfill bench peers`: specfill vs llama.cpp on the same GGUF files and the same prompts.

Every runner gets the same fill-in-the-middle prompt token ids, decodes greedily to the same
stop ids and token budget, and is timed end to end from a cold cache (prefill included), on
the same number of threads (`--threads`, every CPU by default: llama.cpp's `-t`/`-td` and
specfill's native pool):

- llama.cpp: every mode of its C++ `llama-server` (plain, its draft model, its n-gram
  speculation) and llama-cpp-python's loop where it is installed (bench/peers_llama.py). A
  mode that this build lacks or that fails to start gets a row saying why.
- specfill <mode> plain / speculative: our engine, target and draft loaded as the server
  loads them for model.quant = <mode>: `gguf` (the default, and what `auto` picks wherever the
  native kernels run) multiplies straight from the same GGUF files' blocks; `bf16` runs the
  dense weights in torch (converted from the GGUF on first use). "T/D" gives the draft its
  own mode.

Same work on every side: one stop set (every special token of the tokenizer, what the
server stops on), and tokens per second over the same number of tokens: for each prompt the
shorter of the two outputs sets n, and each side is timed to its n-th token (token arrival
times are recorded; a speculative round's tokens arrive together). The share of prompts
with identical outputs is reported beside it.

The load on a shared CPU drifts by minutes, so comparisons are paired: the llama.cpp servers
stay loaded, and each specfill mode is a block in which every llama.cpp mode and that
specfill mode's plain and speculative runs take turns on every prompt (the order rotates).
The headline is specfill's best row against llama-server's best row, over the same tokens of
the same prompts; each specfill row is also given against llama-server plain.
Output: DIR/results.json (`summary` first), DIR/results.md and DIR/tokens_per_s.png.
"""

from __future__ import annotations

import argparse
import gc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lsp_server.bench.peers_llama import LLAMA_MODES, SERVER_MODES, llama_runners
from lsp_server.bench.report import bar_plot, machine_info, markdown_table, median, plain_args, write_json
from lsp_server.engine.types import common_prefix_len

SPECFILL_MODES = "gguf"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", choices=["humaneval", "stdlib-fim"], default="humaneval")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", default="bench-results/peers")
    p.add_argument("--target", default=None, help="registry name (default: the default pair's target)")
    p.add_argument("--draft", default=None, help="registry name (default: the default pair's draft)")
    p.add_argument("--specfill-modes", default=SPECFILL_MODES,
                   help="comma-separated quantization modes; 'T/D' sets the draft's apart; '' skips specfill")
    p.add_argument("--llama-modes", default=",".join(SERVER_MODES),
                   help="subset of " + ",".join(LLAMA_MODES) + " (plain, prompt-lookup: llama-cpp-python)")
    p.add_argument("--lookup-tokens", type=int, default=10, help="llama.cpp prompt-lookup draft length")
    p.add_argument("--llama-draft-max", type=int, default=0,
                   help="llama-server draft: --spec-draft-n-max (0: llama.cpp's own default)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for every side: llama.cpp's -t and specfill's kernels (0: every CPU)")
    p.add_argument("--k", type=int, default=4, help="specfill's initial k")
    p.add_argument("--k-max", type=int, default=12)
    p.add_argument("--p-min", type=float, default=0.7, help="draft confidence stop")
    p.add_argument("--no-lookup", action="store_true", help="specfill without its n-gram drafter")


@dataclass(frozen=True)
class Prompt:
    name: str
    ids: list[int]


# --- specfill ------------------------------------------------------------------------------


def load_specfill(target: str, draft: str, modes: str, threads: int) -> Any:
    """The server's own Runtime for the pair on `threads` threads: `modes` is "T" or "T/D"
    (model.quant tags)."""
    from lsp_server.bench.loading import bench_model, load_bench_runtime

    target_mode, _, draft_mode = modes.partition("/")
    model = bench_model({"target": target, "draft": draft, "dtype": "auto", "device": "cpu",
                         "quant": target_mode, "draft_quant": draft_mode or target_mode})
    runtime, used = load_bench_runtime(model, threads)
    if used != threads:
        raise SystemExit(f"specfill runs on {used} threads, not the {threads} llama.cpp gets")
    return runtime


def specfill_runners(modes: str, args: argparse.Namespace, warm_up: Prompt, stop_ids: set[int],
                     threads: int) -> dict[str, Callable[[Prompt], dict[str, Any]]]:
    """Plain and speculative decoding with one loaded pair."""
    from lsp_server.bench.engine_bench import Runner

    target, draft = pair_names(args)
    runner = Runner(load_specfill(target, draft, modes, threads), args)
    runner.stop_ids = sorted(set(runner.stop_ids) | stop_ids)
    runner.run("target", warm_up.ids[:16])  # first-call allocations

    def run(mode: str, prompt: Prompt) -> dict[str, Any]:
        row = runner.run(mode, prompt.ids)
        row["token_times_s"] = row["stats"]["token_times_s"]
        row["ttft_s"] = row["stats"]["ttft_s"]
        return row

    return {f"specfill {modes} plain": lambda p: run("target", p),
            f"specfill {modes} speculative": lambda p: run("specfill", p)}


# --- glue ----------------------------------------------------------------------------------


def pair_names(args: argparse.Namespace) -> tuple[str, str]:
    from lsp_server.models.registry import get_pair

    pair = get_pair()
    return args.target or pair.target, args.draft or pair.draft


def encoder(tokenizer: Any):
    def encode(text: str) -> list[int]:
        # As lsp_server.backends.local_runtime: text that merely looks like a special token stays text.
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    return encode


def build_prompts(args: argparse.Namespace) -> tuple[list[Prompt], set[int]]:
    from transformers import AutoTokenizer

    from lsp_server.bench.datasets import load_prompts
    from lsp_server.context.prompt import QWEN_FIM, ContextBudget, build_fim_prompt
    from lsp_server.models.registry import ModelPaths, get_model, resolve_cache_dir

    target, _ = pair_names(args)
    tokenizer = AutoTokenizer.from_pretrained(str(ModelPaths.of(resolve_cache_dir(), get_model(target)).hf))
    encode = encoder(tokenizer)
    prompts = [Prompt(p.name, build_fim_prompt(p.prefix, p.suffix, encode, QWEN_FIM, ContextBudget(), "psm").ids)
               for p in load_prompts(args.prompts, args.limit)]
    from lsp_server.backends.local_runtime import special_token_ids

    # What the server stops on: every special token (local_runtime.load_runtime), on every side.
    return prompts, special_token_ids(tokenizer) | {QWEN_FIM.prefix, QWEN_FIM.suffix, QWEN_FIM.middle}


def tokens_per_s(results: list[dict[str, Any]]) -> float:
    seconds = sum(r["seconds"] for r in results)
    return sum(r["n"] for r in results) / seconds if seconds else 0.0


def summarize_row(name: str, results: list[dict[str, Any]], reference: list[dict[str, Any]] | None,
                  load_average: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name, "prompts": len(results), "tokens": sum(r["n"] for r in results),
        "seconds": sum(r["seconds"] for r in results), "tokens_per_s": tokens_per_s(results),
        "median_prompt_tokens_per_s": median([r["tokens_per_s"] for r in results]),
        "median_ttft_s": median([r.get("ttft_s") or (r.get("stats") or {}).get("ttft_s") for r in results]),
        "load_average_1min": load_average,
    }
    stats = [r["stats"] for r in results if "stats" in r]
    drafted = sum(s["drafted"] for s in stats)
    if drafted:
        row["acceptance_rate"] = sum(s["accepted"] for s in stats) / drafted
    if reference is not None:
        by_prompt = {r["prompt"]: r["tokens"] for r in reference}
        pairs = [(r["tokens"], by_prompt[r["prompt"]]) for r in results if r["prompt"] in by_prompt]
        row["identical_to_reference"] = sum(a == b for a, b in pairs) / len(pairs) if pairs else None
        row["common_prefix_share_vs_reference"] = median(
            [common_prefix_len(a, b) / max(1, len(b)) for a, b in pairs])
    return row


def reference_name(results: dict[str, list[dict[str, Any]]]) -> str | None:
    """The llama.cpp row the specfill rows are compared with: the C++ server where it ran
    (the faster of the two), else llama-cpp-python's loop."""
    for name in ("llama-server", "llama.cpp plain"):
        if name in results:
            return name
    return None


def time_to(run: dict[str, Any], n: int) -> float:
    """Seconds from the start of a run to its n-th token (n >= 1)."""
    times = run.get("token_times_s") or []
    return times[n - 1] if len(times) >= n else run["seconds"]


def equal_n_rates(runs: list[dict[str, Any]], reference: list[dict[str, Any]]) -> tuple[float, float, int]:
    """Tokens/s of `runs` and of `reference` over the same number of tokens per prompt (the
    shorter output's), prompts of the same block paired; and how many tokens that is."""
    ref = {(r["prompt"], r["block"]): r for r in reference}
    n_total, t_runs, t_ref = 0, 0.0, 0.0
    for r in runs:
        other = ref.get((r["prompt"], r["block"]))
        n = min(r["n"], other["n"]) if other else 0
        if n:
            n_total += n
            t_runs += time_to(r, n)
            t_ref += time_to(other, n)
    return (n_total / t_runs if t_runs else 0.0), (n_total / t_ref if t_ref else 0.0), n_total


def paired_ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Each specfill row over the reference llama.cpp row: tokens/s over the same tokens."""
    name_ref = reference_name(results)
    ratios = {}
    for name, runs in results.items():
        if name.startswith("specfill") and name_ref:
            ours, theirs, n = equal_n_rates(runs, results[name_ref])
            if theirs:
                ratios[name] = {"ratio": ours / theirs, "tokens_per_s": ours,
                                "reference_tokens_per_s": theirs, "tokens": n}
    return ratios


def best_row(results: dict[str, list[dict[str, Any]]], prefix: str) -> str | None:
    """The fastest row (its own tokens/s) whose name starts with `prefix`."""
    names = [n for n in results if n.startswith(prefix)]
    return max(names, key=lambda n: tokens_per_s(results[n])) if names else None


def headline(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """specfill's best row against llama-server's best (llama-cpp-python's where no server
    mode ran), over the same tokens of the same prompts."""
    ours = best_row(results, "specfill")
    theirs = best_row(results, "llama-server") or best_row(results, "llama.cpp")
    if ours is None or theirs is None:
        return None
    rate, their_rate, n = equal_n_rates(results[ours], results[theirs])
    return {"specfill": ours, "llama": theirs, "ratio": rate / their_rate if their_rate else None,
            "tokens_per_s": rate, "llama_tokens_per_s": their_rate, "tokens": n}


def summarize(rows: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]],
              not_run: dict[str, str] | None = None) -> dict[str, Any]:
    summary: dict[str, Any] = {"tokens_per_s": {r["name"]: r["tokens_per_s"] for r in rows},
                               "reference": reference_name(results), "best_vs_best": headline(results),
                               "not_run": dict(not_run or {})}
    ratios = paired_ratios(results)
    if ratios:
        best = max(ratios, key=lambda name: ratios[name]["ratio"])
        summary["specfill_vs_llamacpp"] = {"per_mode": ratios, "best_mode": best, "best": ratios[best]["ratio"]}
    return summary


def headline_text(summary: dict[str, Any]) -> str:
    top = summary.get("best_vs_best")
    if not top or not top["ratio"]:
        return "\nno headline: specfill or llama.cpp did not run\n"
    return (f"\nbest vs best: {top['specfill']} {top['tokens_per_s']:.1f} tokens/s against {top['llama']} "
            f"{top['llama_tokens_per_s']:.1f} over the same {top['tokens']} tokens: **{top['ratio']:.2f}x**\n")


def write_report(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    ratios = (summary.get("specfill_vs_llamacpp") or {}).get("per_mode", {})
    ref = summary.get("reference") or "llama.cpp"
    ran = [[r["name"], r["tokens_per_s"], (ratios.get(r["name"]) or {}).get("ratio"), r["median_prompt_tokens_per_s"],
            r["median_ttft_s"], r.get("acceptance_rate"), r.get("identical_to_reference"), r["load_average_1min"]]
           for r in rows]
    skipped = [[name, f"not run: {why}", None, None, None, None, None, None]
               for name, why in summary.get("not_run", {}).items()]
    table = markdown_table(
        ["runner", "tokens/s", f"x {ref} (same tokens)", "median prompt tok/s", "median TTFT s",
         "acceptance", f"same output as {ref}", "load avg"], ran + skipped)
    header = (f"# specfill bench peers\n\n{args.prompts}, {args.limit} prompts, {args.max_new_tokens} new tokens, "
              f"greedy, cold caches, {summary.get('threads')} threads on every side\n\n")
    (out / "results.md").write_text(header + table + headline_text(summary))
    bar_plot(out / "tokens_per_s.png", [r["name"] for r in rows], [r["tokens_per_s"] for r in rows],
             "tokens/s", f"{args.prompts}: specfill vs llama.cpp, same GGUF, tokens/s")


class Recorder:
    """Results by row and block, rewritten to results.json after every run (a long run that
    is stopped still leaves what it measured)."""

    def __init__(self, out: Path, info: dict[str, Any], not_run: dict[str, str]):
        self.out, self.info, self.not_run = out, info, not_run
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.rows: list[dict[str, Any]] = []
        self.load: dict[str, float] = {}

    def record(self, name: str, block: int, prompt: Prompt, result: dict[str, Any]) -> None:
        self.results.setdefault(name, []).append({"prompt": prompt.name, "block": block, **result})
        self.load[name] = os.getloadavg()[0]
        ref = reference_name(self.results)
        self.rows = [summarize_row(n, rs, self.results[ref] if ref and n != ref else None, self.load[n])
                     for n, rs in self.results.items()]
        self.write()

    def summary(self) -> dict[str, Any]:
        return {**summarize(self.rows, self.results, self.not_run), "threads": self.info["threads"]}

    def write(self) -> None:
        write_json(self.out / "results.json", {"summary": self.summary(), **self.info, "rows": self.rows,
                                               "results": self.results})


def run_block(block: int, runners: dict[str, Callable[[Prompt], dict[str, Any]]], prompts: list[Prompt],
              recorder: Recorder) -> None:
    """Every runner on every prompt, the order rotating; a llama.cpp mode that fails on a
    prompt is dropped with its reason (its row says so), the others go on."""
    names = list(runners)
    for i, prompt in enumerate(prompts):
        for name in names[i % len(names):] + names[:i % len(names)]:  # rotate: nobody always first
            if name not in runners:
                continue
            try:
                result = runners[name](prompt)
            except Exception as exc:  # noqa: BLE001 - only llama.cpp's modes may fail and be dropped
                if name.startswith("specfill"):
                    raise
                print(f"dropping {name}: {exc}", flush=True)
                recorder.not_run[name] = f"failed on {prompt.name}: {exc}"
                del runners[name]
                continue
            recorder.record(name, block, prompt, result)


def run(args: argparse.Namespace) -> int:
    from lsp_server.bench.loading import bench_threads
    from lsp_server.models.registry import ModelPaths, get_model, resolve_cache_dir

    threads = bench_threads(args.threads)
    out = Path(args.out)
    prompts, stop_ids = build_prompts(args)
    ggufs = tuple(ModelPaths.of(resolve_cache_dir(), get_model(name)).gguf(get_model(name))
                  for name in pair_names(args))
    info = {"machine": machine_info(), "args": plain_args(args), "gguf": [str(g) for g in ggufs],
            "threads": threads}
    llama, not_run = llama_runners(args, prompts, ggufs, stop_ids, threads, out)
    recorder = Recorder(out, info, not_run)
    blocks = [m.strip() for m in args.specfill_modes.split(",") if m.strip()] or [None]
    for block, modes in enumerate(blocks):
        print(f"block {block}: specfill {modes or '(none)'} with llama.cpp {', '.join(llama) or '(none)'} "
              f"on {threads} threads ...", flush=True)
        runners = dict(llama)
        if modes:
            runners.update(specfill_runners(modes, args, prompts[0], stop_ids, threads))
        run_block(block, runners, prompts, recorder)
        llama = {name: fn for name, fn in llama.items() if name in runners}
        del runners
        gc.collect()
    if not recorder.rows:
        print("nothing ran")
        return 1
    recorder.write()
    write_report(out, recorder.summary(), recorder.rows, args)
    print((out / "results.md").read_text())
    return 0
