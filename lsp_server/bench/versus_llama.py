"""`specfill bench llamacpp`: specfill's decode and prefill against llama.cpp's `llama-bench`
in one command, on the same GGUF, the same threads and the same context lengths.

The machine drifts by +-20 % over tens of minutes (two runs 70 minutes apart on a Zen 4 gave
0.90x and 1.22x), so a ratio is only worth something when both sides run interleaved: each
round runs every test once on each side, the side that goes first alternating, and the ratio
of a test is the median over rounds of the two sides' tokens/s in the same round.

Tests, as llama-bench defines them: `pp N` feeds N prompt tokens from an empty context;
`tg N @ d` generates N tokens one at a time after d tokens of context. llama-bench runs
`-p N -n 0` and `-p 0 -n N -d d` with `-r 1`. specfill runs the same on the server's own
target (model.quant auto: the GGUF's blocks on the native kernels where they run): the
prefill through the engine's chunked feed (`KVSlot.extend`), the decode as single-token
feeds with the next token picked greedily, which is a plain decode step without the
engine's streaming around it. Prompt tokens are random ids (seeded), as llama-bench's are.
Output: DIR/results.json (`summary` first) and DIR/results.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each test once a side a round)")
    p.add_argument("--prefill", type=int, default=512, help="pp: prompt tokens fed from an empty context")
    p.add_argument("--decode", type=int, default=128, help="tg: tokens generated one at a time")
    p.add_argument("--depths", default="0,512", help="tg: context lengths before generating (comma-separated)")
    p.add_argument("--threads", type=int, default=0, help="threads for both sides (0: every CPU)")
    p.add_argument("--target", default=None, help="registry name (default: the default pair's target)")
    p.add_argument("--out", default="bench-results/llamacpp")


def cases(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(name, tokens, depth) of each test: one prefill, one decode per depth."""
    depths = [int(d) for d in args.depths.split(",") if d.strip()]
    return [(f"pp{args.prefill}", args.prefill, 0)] + [(f"tg{args.decode} @ d{d}", args.decode, d) for d in depths]


def llama_bench_rate(binary: Path, gguf: Path, threads: int, name: str, n: int, depth: int) -> float:
    """llama-bench's tokens/s for one test, one repetition."""
    from lsp_server.backends.llama_binary import llama_env

    shape = ["-p", str(n), "-n", "0"] if name.startswith("pp") else ["-p", "0", "-n", str(n), "-d", str(depth)]
    done = subprocess.run([str(binary), "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json", *shape],
                          capture_output=True, text=True, timeout=600, env=llama_env())
    if done.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return float(json.loads(done.stdout)[0]["avg_ts"])


class SpecfillSide:
    """The server's target on a fresh KV slot per test, fed as the engine feeds it."""

    def __init__(self, runtime: Any, seed: int = 0):
        from lsp_server.engine.cache import make_slot
        from lsp_server.engine.speculative import _chunk

        self.target = runtime.engine.target
        self.make_slot = lambda: make_slot(self.target, lean=True)
        self.chunk = lambda slot: _chunk(slot, runtime.engine.options.prefill_chunk)
        self.rng = random.Random(seed)
        self.vocab = min(self.target.config.vocab_size, 150_000)  # ordinary ids, below the specials

    def ids(self, n: int) -> list[int]:
        return [self.rng.randrange(self.vocab) for _ in range(n)]

    def rate(self, name: str, n: int, depth: int) -> float:
        import torch

        slot = self.make_slot()
        with torch.inference_mode():
            if name.startswith("pp"):
                t = time.perf_counter()
                slot.extend(self.ids(n), self.chunk(slot))
                return n / (time.perf_counter() - t)
            _, logits = slot.extend(self.ids(depth) or self.ids(1), self.chunk(slot))
            t = time.perf_counter()
            for _ in range(n):
                logits = slot.feed([int(torch.argmax(logits))], all_logits=False)[-1]
            return n / (time.perf_counter() - t)


def run_rounds(args: argparse.Namespace, specfill: SpecfillSide, llama: Any,
               on_row: Any = lambda rows: None) -> list[dict[str, Any]]:
    """Every test on both sides each round, the first side alternating; one row per test and
    round, handed to `on_row` as it comes (a run stopped early keeps what it measured)."""
    import os

    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for name, n, depth in cases(args):
            sides = [("specfill", specfill), ("llama.cpp", llama)]
            rates = {}
            for side, runner in sides if r % 2 == 0 else sides[::-1]:
                rates[side] = runner(name, n, depth) if side == "llama.cpp" else runner.rate(name, n, depth)
            rows.append({"round": r, "test": name, **rates, "ratio": rates["specfill"] / rates["llama.cpp"],
                         "load_average_1min": os.getloadavg()[0]})
            on_row(rows)
            print(f"round {r}: {name}: specfill {rates['specfill']:.1f}, llama-bench {rates['llama.cpp']:.1f} "
                  f"tokens/s ({rows[-1]['ratio']:.2f}x)", flush=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per test: median tokens/s of each side and the median of the rounds' paired ratios."""
    out = {}
    for name in dict.fromkeys(r["test"] for r in rows):
        mine = [r for r in rows if r["test"] == name]
        out[name] = {"specfill_tokens_per_s": statistics.median(r["specfill"] for r in mine),
                     "llama_bench_tokens_per_s": statistics.median(r["llama.cpp"] for r in mine),
                     "ratio": statistics.median(r["ratio"] for r in mine),
                     "ratio_min": min(r["ratio"] for r in mine), "ratio_max": max(r["ratio"] for r in mine),
                     "rounds": len(mine)}
    return out


def write_report(out: Path, summary: dict[str, Any], info: dict[str, Any]) -> None:
    table = markdown_table(
        ["test", "specfill tokens/s", "llama-bench tokens/s", "specfill / llama-bench (median of rounds)",
         "lowest round", "highest round"],
        [[name, s["specfill_tokens_per_s"], s["llama_bench_tokens_per_s"], s["ratio"], s["ratio_min"], s["ratio_max"]]
         for name, s in summary.items()])
    m = info["machine"]
    header = (f"# specfill bench llamacpp\n\n{m['date']}, {m['cpu']}, kernels {m['kernel_variant']}, "
              f"{info['threads']} threads on both sides, {info['args']['rounds']} interleaved rounds, "
              f"load average at start {m['load_average_at_start'][0]:.2f}\n\n")
    (out / "results.md").write_text(header + table)


def run(args: argparse.Namespace) -> int:
    from lsp_server.backends.llama_binary import llama_bench_path
    from lsp_server.bench.loading import bench_model, bench_threads, load_bench_runtime
    from lsp_server.models.registry import ModelPaths, get_model, get_pair, resolve_cache_dir

    binary = llama_bench_path()
    if binary is None:
        raise SystemExit("no llama-bench built: run `make llama-server` (about 8 min)")
    machine = machine_info()  # before the run: its date and load average are the start's
    threads = bench_threads(args.threads)
    target = args.target or get_pair().target
    gguf = ModelPaths.of(resolve_cache_dir(), get_model(target)).gguf(get_model(target))
    settings = {"target": target, "dtype": "auto", "device": "cpu", "quant": "auto", "draft_quant": "auto"}
    runtime, used = load_bench_runtime(bench_model(settings), threads)
    if used != threads:
        raise SystemExit(f"specfill runs on {used} threads, not the {threads} llama-bench gets")
    out = Path(args.out)
    info = {"machine": machine, "args": plain_args(args), "threads": threads, "gguf": str(gguf),
            "llama_bench": str(binary)}

    def save(rows: list[dict[str, Any]]) -> None:
        write_json(out / "results.json", {"summary": summarize(rows), **info, "rows": rows})

    rows = run_rounds(args, SpecfillSide(runtime),
                      lambda name, n, depth: llama_bench_rate(binary, gguf, threads, name, n, depth), save)
    summary = summarize(rows)
    write_report(out, summary, info)
    print((out / "results.md").read_text())
    return 0
