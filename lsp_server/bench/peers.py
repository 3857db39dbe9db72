"""`specfill bench peers`: specfill vs llama.cpp on the same GGUF files and the same prompts.

Every runner gets the same fill-in-the-middle prompt token ids, decodes greedily to the same
stop ids and token budget, and is timed end to end from a cold cache (prefill included):

- llama-server plain: llama.cpp's own C++ server (what llama.vscode and llama.vim users run),
  built by `scripts/build-llama-server.sh`, on the target's GGUF, fed the same token ids over
  its streaming `/completion` (no prompt cache). The faster llama.cpp row.
- llama.cpp plain: `llama_cpp.Llama` on the target's GGUF, as published (Q4_K_M), through
  llama-cpp-python's Python generate loop.
- llama.cpp prompt-lookup: the same with `LlamaPromptLookupDecoding` as its drafter. It needs
  `logits_all=True`, or it crashes once prompt + output pass 512 tokens; llama-cpp-python
  can't take a second GGUF as a draft model, so this is its only speculative mode.
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

The load on a shared CPU drifts by minutes, so comparisons are paired: the llama.cpp models
stay loaded, and each specfill mode is a block in which llama.cpp plain and that mode's
plain and speculative runs take turns on every prompt (the order rotates). A mode's ratio
to llama.cpp uses the llama.cpp runs of its own block. Prompt-lookup runs in the first
block only. llama-cpp-python is a benchmark-only dependency built by
`scripts/install-llama-cpp.sh`; without it the llama.cpp rows are skipped with a message.
Output: DIR/results.json (`summary` first), DIR/results.md and DIR/tokens_per_s.png.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lsp_server.bench.report import bar_plot, machine_info, markdown_table, median, plain_args, write_json
from lsp_server.engine.types import common_prefix_len

LLAMA_MODES = ("server", "plain", "prompt-lookup")
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
    p.add_argument("--llama-modes", default=",".join(LLAMA_MODES), help="subset of " + ",".join(LLAMA_MODES))
    p.add_argument("--lookup-tokens", type=int, default=10, help="llama.cpp prompt-lookup draft length")
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


# --- llama.cpp -----------------------------------------------------------------------------


def llama_cpp_missing(mode: str) -> str | None:
    """Why a llama.cpp row can't run, or None."""
    if mode == "server":
        from lsp_server.backends.llama_binary import llama_server_path

        return None if llama_server_path() else "no llama-server built: run `make llama-server` (about 8 min)"
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed: run scripts/install-llama-cpp.sh (about 9 min)"
    return None


class LlamaRunner:
    def __init__(self, gguf: Path, n_ctx: int, threads: int, lookup_tokens: int | None):
        from llama_cpp import Llama

        draft = None
        if lookup_tokens:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens)
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         logits_all=draft is not None, draft_model=draft, verbose=False)

    def run(self, ids: list[int], max_new: int, stop_ids: set[int]) -> dict[str, Any]:
        self.llm.reset()  # cold: no KV prefix carried over from the previous prompt
        out: list[int] = []
        times: list[float] = []
        t = time.perf_counter()
        tokens = self.llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        for token in tokens:
            if token in stop_ids:
                break
            out.append(int(token))
            times.append(time.perf_counter() - t)
            if len(out) >= max_new:
                break
        tokens.close()
        return timed_result(out, times, time.perf_counter() - t)


class LlamaServerRunner:
    """llama.cpp's C++ `llama-server` on loopback, fed token ids over streaming /completion."""

    def __init__(self, gguf: Path, n_ctx: int, threads: int):
        import atexit

        from lsp_server.backends.llama_binary import LlamaServerProcess

        self.server = LlamaServerProcess(gguf, threads=threads, ctx=n_ctx).start()
        atexit.register(self.server.stop)  # the benchmark's child: it must not outlive the run

    def run(self, ids: list[int], max_new: int, stop_ids: set[int]) -> dict[str, Any]:
        import json

        import httpx

        body = {"prompt": ids, "n_predict": max_new, "stream": True, "cache_prompt": False,
                "temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                "return_tokens": True, "samplers": ["top_k"]}
        out: list[int] = []
        times: list[float] = []
        t = time.perf_counter()
        with httpx.stream("POST", self.server.url + "/completion", json=body, timeout=120.0) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[len("data: "):])
                for token in chunk.get("tokens") or []:
                    if token in stop_ids or len(out) >= max_new:
                        break
                    out.append(int(token))
                    times.append(time.perf_counter() - t)
                if chunk.get("stop") or len(out) >= max_new or any(x in stop_ids for x in chunk.get("tokens") or []):
                    break  # closing the stream stops the server's generation
        return timed_result(out, times, time.perf_counter() - t)


def timed_result(tokens: list[int], times: list[float], seconds: float) -> dict[str, Any]:
    return {"tokens": tokens, "n": len(tokens), "seconds": seconds, "token_times_s": times,
            "ttft_s": times[0] if times else None,
            "tokens_per_s": len(tokens) / seconds if seconds else 0.0}


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


def summarize(rows: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"tokens_per_s": {r["name"]: r["tokens_per_s"] for r in rows},
                               "reference": reference_name(results)}
    ratios = paired_ratios(results)
    if ratios:
        best = max(ratios, key=lambda name: ratios[name]["ratio"])
        summary["specfill_vs_llamacpp"] = {"per_mode": ratios, "best_mode": best, "best": ratios[best]["ratio"]}
    return summary


def write_report(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    ratios = (summary.get("specfill_vs_llamacpp") or {}).get("per_mode", {})
    ref = summary.get("reference") or "llama.cpp"
    table = markdown_table(
        ["runner", "tokens/s", f"x {ref} (same tokens)", "median prompt tok/s", "median TTFT s",
         "acceptance", f"same output as {ref}", "load avg"],
        [[r["name"], r["tokens_per_s"], (ratios.get(r["name"]) or {}).get("ratio"), r["median_prompt_tokens_per_s"],
          r["median_ttft_s"], r.get("acceptance_rate"), r.get("identical_to_reference"), r["load_average_1min"]]
         for r in rows])
    vs = summary.get("specfill_vs_llamacpp") or {}
    best = f"\nbest specfill / {ref}: {vs['best']:.2f}x ({vs['best_mode']})\n" if vs.get("best") else ""
    header = (f"# specfill bench peers\n\n{args.prompts}, {args.limit} prompts, {args.max_new_tokens} new tokens, "
              f"greedy, cold caches, {os.environ.get('OMP_WAIT_POLICY', 'default')} OpenMP wait policy\n\n")
    (out / "results.md").write_text(header + table + best)
    bar_plot(out / "tokens_per_s.png", [r["name"] for r in rows], [r["tokens_per_s"] for r in rows],
             "tokens/s", f"{args.prompts}: specfill vs llama.cpp, same GGUF, tokens/s")


def llama_runners(args: argparse.Namespace, prompts: list[Prompt], gguf: Path, stop_ids: set[int],
                  threads: int) -> dict[str, Callable[[Prompt], dict[str, Any]]]:
    modes = [m for m in args.llama_modes.split(",") if m]
    unknown = set(modes) - set(LLAMA_MODES)
    if unknown:
        raise SystemExit(f"unknown llama.cpp modes: {', '.join(sorted(unknown))}")
    for mode in list(modes):
        missing = llama_cpp_missing(mode)
        if missing:
            print(f"skipping llama.cpp {mode}: {missing}", flush=True)
            modes.remove(mode)
    n_ctx = max(len(p.ids) for p in prompts) + args.max_new_tokens + args.lookup_tokens + 16
    runners = {}
    for mode in modes:
        if mode == "server":
            llama: Any = LlamaServerRunner(gguf, n_ctx, threads)
            name = "llama-server"
        else:
            llama = LlamaRunner(gguf, n_ctx, threads, args.lookup_tokens if mode == "prompt-lookup" else None)
            name = f"llama.cpp {mode}"
        llama.run(prompts[0].ids[:16], 2, stop_ids)  # warm-up: first-call allocations
        runners[name] = lambda p, llama=llama: llama.run(p.ids, args.max_new_tokens, stop_ids)
    return runners


def run(args: argparse.Namespace) -> int:
    from lsp_server.bench.loading import bench_threads

    threads = bench_threads(args.threads)
    out = Path(args.out)
    prompts, stop_ids = build_prompts(args)
    from lsp_server.models.registry import ModelPaths, get_model, resolve_cache_dir

    target, _ = pair_names(args)
    gguf = ModelPaths.of(resolve_cache_dir(), get_model(target)).gguf(get_model(target))
    info = {"machine": machine_info(), "args": plain_args(args), "gguf": str(gguf), "threads": threads,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}
    results: dict[str, list[dict[str, Any]]] = {}
    load: dict[str, float] = {}
    rows: list[dict[str, Any]] = []

    def record(name: str, block: int, prompt: Prompt, result: dict[str, Any]) -> None:
        results.setdefault(name, []).append({"prompt": prompt.name, "block": block, **result})
        load[name] = os.getloadavg()[0]
        ref = reference_name(results)
        rows[:] = [summarize_row(n, rs, results[ref] if ref and n != ref else None, load[n])
                   for n, rs in results.items()]
        write_json(out / "results.json", {"summary": summarize(rows, results), **info, "rows": rows,
                                          "results": results})

    llama = llama_runners(args, prompts, gguf, stop_ids, threads)
    blocks = [m.strip() for m in args.specfill_modes.split(",") if m.strip()] or [None]
    for block, modes in enumerate(blocks):
        print(f"block {block}: specfill {modes or '(none)'} with llama.cpp ...", flush=True)
        runners = {name: fn for name, fn in llama.items() if block == 0 or name == reference_name(llama)}
        if modes:
            runners.update(specfill_runners(modes, args, prompts[0], stop_ids, threads))
        names = list(runners)
        for i, prompt in enumerate(prompts):
            for name in names[i % len(names):] + names[:i % len(names)]:  # rotate: nobody always first
                record(name, block, prompt, runners[name](prompt))
        del runners
        gc.collect()
    if not rows:
        print("nothing ran")
        return 1
    summary = summarize(rows, results)
    write_json(out / "results.json", {"summary": summary, **info, "rows": rows, "results": results})
    write_report(out, summary, rows, args)
    print((out / "results.md").read_text())
    return 0
