"""`specfill bench peers`: specfill vs llama.cpp on the same GGUF files and the same prompts.

Every runner gets the same fill-in-the-middle prompt token ids, decodes greedily to the same
stop ids and token budget, and is timed end to end from a cold cache (prefill included):

- llama.cpp plain: `llama_cpp.Llama` on the target's GGUF, as published (Q4_K_M).
- llama.cpp prompt-lookup: the same with `LlamaPromptLookupDecoding` as its drafter. It needs
  `logits_all=True`, or it crashes once prompt + output pass 512 tokens; llama-cpp-python
  can't take a second GGUF as a draft model, so this is its only speculative mode.
- specfill <mode> plain / speculative: our engine, target and draft loaded from the converted
  safetensors and quantized with `apply_quant` (bf16, int8, int4-gN, mixed-gN; "T/D" gives
  the draft its own mode, e.g. "bf16/int4-g32").

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

LLAMA_MODES = ("plain", "prompt-lookup")
SPECFILL_MODES = "bf16,int8,int4-g32,mixed-g32,w8a8-g32"


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
    p.add_argument("--threads", type=int, default=0, help="threads for both (0: torch's default)")
    p.add_argument("--k", type=int, default=4, help="specfill's initial k")
    p.add_argument("--k-max", type=int, default=12)
    p.add_argument("--p-min", type=float, default=0.7, help="draft confidence stop")
    p.add_argument("--no-lookup", action="store_true", help="specfill without its n-gram drafter")


@dataclass(frozen=True)
class Prompt:
    name: str
    ids: list[int]


# --- llama.cpp -----------------------------------------------------------------------------


def llama_cpp_missing() -> str | None:
    """Why llama.cpp rows can't run, or None."""
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
        ttft = None
        t = time.perf_counter()
        tokens = self.llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        for token in tokens:
            ttft = ttft if ttft is not None else time.perf_counter() - t
            if token in stop_ids:
                break
            out.append(int(token))
            if len(out) >= max_new:
                break
        tokens.close()
        elapsed = time.perf_counter() - t
        return {"tokens": out, "n": len(out), "seconds": elapsed, "ttft_s": ttft,
                "tokens_per_s": len(out) / elapsed if elapsed else 0.0}


# --- specfill ------------------------------------------------------------------------------


def load_specfill(target: str, draft: str, modes: str) -> Any:
    """The server's own Runtime for the pair, quantized: `modes` is "T" or "T/D" (QuantConfig tags)."""
    from lsp_server.config import Config, ModelConfig
    from lsp_server.runtime import load_runtime

    target_mode, _, draft_mode = modes.partition("/")
    model = ModelConfig(target=target, draft=draft, dtype="bf16", device="cpu",
                        quant=target_mode, draftQuant=draft_mode or target_mode)
    return load_runtime(Config(model=model), lambda line: print(f"[load] {line}", flush=True))


def specfill_runners(modes: str, args: argparse.Namespace,
                     warm_up: Prompt) -> dict[str, Callable[[Prompt], dict[str, Any]]]:
    """Plain and speculative decoding with one loaded, quantized pair."""
    from lsp_server.bench.engine_bench import Runner

    target, draft = pair_names(args)
    runner = Runner(load_specfill(target, draft, modes), args)
    runner.run("target", warm_up.ids[:16])  # first-call allocations
    return {f"specfill {modes} plain": lambda p: runner.run("target", p.ids),
            f"specfill {modes} speculative": lambda p: runner.run("specfill", p.ids)}


# --- glue ----------------------------------------------------------------------------------


def pair_names(args: argparse.Namespace) -> tuple[str, str]:
    from lsp_server.models.registry import get_pair

    pair = get_pair()
    return args.target or pair.target, args.draft or pair.draft


def encoder(tokenizer: Any):
    def encode(text: str) -> list[int]:
        # As lsp_server.runtime: text that merely looks like a special token stays text.
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    return encode


def build_prompts(args: argparse.Namespace) -> tuple[list[Prompt], set[int]]:
    from transformers import AutoTokenizer

    from lsp_server.bench.datasets import load_prompts
    from lsp_server.models.registry import ModelPaths, get_model, resolve_cache_dir
    from lsp_server.prompt import QWEN_FIM, ContextBudget, build_fim_prompt

    target, _ = pair_names(args)
    tokenizer = AutoTokenizer.from_pretrained(str(ModelPaths.of(resolve_cache_dir(), get_model(target)).hf))
    encode = encoder(tokenizer)
    prompts = [Prompt(p.name, build_fim_prompt(p.prefix, p.suffix, encode, QWEN_FIM, ContextBudget(), "psm").ids)
               for p in load_prompts(args.prompts, args.limit)]
    vocab = tokenizer.get_vocab()
    stops = {vocab[t] for t in ("<|endoftext|>", "<|im_end|>") if t in vocab}
    return prompts, stops | {QWEN_FIM.prefix, QWEN_FIM.suffix, QWEN_FIM.middle}


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
        row["identical_to_llamacpp_plain"] = sum(a == b for a, b in pairs) / len(pairs) if pairs else None
        row["common_prefix_share_vs_llamacpp_plain"] = median(
            [common_prefix_len(a, b) / max(1, len(b)) for a, b in pairs])
    return row


def paired_ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """specfill tokens/s over llama.cpp plain's, each over the blocks the specfill row ran in."""
    llama = results.get("llama.cpp plain", [])
    ratios = {}
    for name, runs in results.items():
        blocks = {r["block"] for r in runs}
        reference = tokens_per_s([r for r in llama if r["block"] in blocks])
        if name.startswith("specfill") and reference:
            ratios[name] = tokens_per_s(runs) / reference
    return ratios


def summarize(rows: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"tokens_per_s": {r["name"]: r["tokens_per_s"] for r in rows}}
    ratios = paired_ratios(results)
    if ratios:
        best = max(ratios, key=lambda name: ratios[name])
        summary["specfill_vs_llamacpp_plain"] = {"per_mode": ratios, "best_mode": best, "best": ratios[best]}
    return summary


def write_report(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    ratios = (summary.get("specfill_vs_llamacpp_plain") or {}).get("per_mode", {})
    table = markdown_table(
        ["runner", "tokens/s", "x llama.cpp plain (paired)", "median prompt tok/s", "median TTFT s",
         "acceptance", "same as llama.cpp", "load avg"],
        [[r["name"], r["tokens_per_s"], ratios.get(r["name"]), r["median_prompt_tokens_per_s"], r["median_ttft_s"],
          r.get("acceptance_rate"), r.get("identical_to_llamacpp_plain"), r["load_average_1min"]] for r in rows])
    vs = summary.get("specfill_vs_llamacpp_plain") or {}
    best = f"\nbest specfill / llama.cpp plain: {vs['best']:.2f}x ({vs['best_mode']})\n" if vs.get("best") else ""
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
    n_ctx = max(len(p.ids) for p in prompts) + args.max_new_tokens + args.lookup_tokens + 16
    runners = {}
    for mode in modes:
        llama = LlamaRunner(gguf, n_ctx, threads, args.lookup_tokens if mode == "prompt-lookup" else None)
        llama.run(prompts[0].ids[:16], 2, stop_ids)  # warm-up: first-call allocations
        runners[f"llama.cpp {mode}"] = lambda p, llama=llama: llama.run(p.ids, args.max_new_tokens, stop_ids)
    return runners


def run(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
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
        reference = results.get("llama.cpp plain")
        rows[:] = [summarize_row(n, rs, reference if n != "llama.cpp plain" else None, load[n])
                   for n, rs in results.items()]
        write_json(out / "results.json", {"summary": summarize(rows, results), **info, "rows": rows,
                                          "results": results})

    missing = llama_cpp_missing() if args.llama_modes else None
    if missing:
        print(f"skipping llama.cpp: {missing}", flush=True)
        info["llama_cpp_skipped"] = missing
    llama = {} if missing else llama_runners(args, prompts, gguf, stop_ids, threads)
    blocks = [m.strip() for m in args.specfill_modes.split(",") if m.strip()] or [None]
    for block, modes in enumerate(blocks):
        print(f"block {block}: specfill {modes or '(none)'} with llama.cpp ...", flush=True)
        runners = {name: fn for name, fn in llama.items() if block == 0 or name == "llama.cpp plain"}
        if modes:
            runners.update(specfill_runners(modes, args, prompts[0]))
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
