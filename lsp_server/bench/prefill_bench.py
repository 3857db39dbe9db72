"""`specfill bench prefill`: the prefill of a long prompt on the server's own target and draft,
the engine's feeds against the 16-row feeds on the exact kernels that the engine used before
2026-12-07, interleaved in one process; and how far that moves the target's logits.

    specfill bench prefill [--tokens 1000] [--rounds 3] [--out DIR]

`engine`: feeds of up to lean_step.NATIVE_MAX_ROWS rows (as a request's prefill runs; warms
grow theirs: speculative._first_chunk) through the native one-call layers, their products on
the kernels' wide path from lean_step.WIDE_ROWS rows (weights quantized again to int8 per
32-row tile, shared by every row: native.set_wide_rows; the draft's Q4_0 matrices from
lean_step.WIDE_ROWS_Q4_0 rows on tiles of their own nibbles, the repacked kernels' bits:
native.set_wide_rows_q4_0). `rows16`: feeds of lean_step.ROW_BY_ROW_MAX_ROWS rows, every
product on the row-independent kernels that verifies use, both wide paths off. Each round
prefills the prompt once a mode on a fresh cache, the mode that goes first alternating; the
ratio is the median over rounds of the two modes' times in the same round (this machine
drifts by +-20 % within an hour). The prompt is the project's own source
text, tokenized (prefill speed does not depend on which tokens). The logits after the whole
prompt: the relative L2 distance between the modes and whether their top tokens agree; the
exact paths themselves differ by float rounding, so the same distance is given for the
engine's earlier torch layers (512-row feeds) against rows16. Output: DIR/results.json and
DIR/results.md.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json

SOURCES = ("engine/speculative.py", "engine/drafters.py", "engine/costs.py", "engine/cache.py",
           "server/handlers.py", "completion/documents.py")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=1000, help="prompt tokens")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each mode once a round)")
    p.add_argument("--out", default="bench-results/prefill")


@contextmanager
def mode(name: str) -> Iterator[int]:
    """The feed size of mode `name`, with the kernels set for it; restored after."""
    from lsp_server.engine import lean_step
    from lsp_server.kernels import native

    saved = lean_step.NATIVE_MAX_ROWS, native.wide_rows(), native.wide_rows_q4_0()
    if name != "engine":  # the repacked kernels, one-call layers of at most 16 rows
        lean_step.NATIVE_MAX_ROWS = lean_step.ROW_BY_ROW_MAX_ROWS
        native.set_wide_rows(0)
        native.set_wide_rows_q4_0(0)
    try:  # torch512: more rows than the one-call layers take, so lean_step's torch layers
        yield 512 if name == "torch512" else lean_step.NATIVE_MAX_ROWS
    finally:
        lean_step.NATIVE_MAX_ROWS = saved[0]
        native.set_wide_rows(saved[1])
        native.set_wide_rows_q4_0(saved[2])


def prompt_ids(runtime: Any, tokens: int) -> list[int]:
    root = Path(__file__).resolve().parents[1]
    text = "".join((root / name).read_text() for name in SOURCES if (root / name).exists())
    ids = runtime.encode(text)
    while len(ids) < tokens:
        ids = ids + ids
    return ids[:tokens]


def timed_prefill(slot: Any, ids: list[int], chunk: int) -> float:
    slot.reset()
    start = time.perf_counter()
    slot.extend(ids, chunk)
    return time.perf_counter() - start


def last_logits(slot: Any, ids: list[int], chunk: int) -> Any:
    slot.reset()
    slot.extend(ids[:-1], chunk)
    return slot.feed(ids[-1:], all_logits=True)[-1].float().clone()


def run(args: argparse.Namespace) -> int:
    import torch

    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.config import Config

    runtime = load_runtime(Config(), lambda line: print(f"[load] {line}", flush=True))
    gc.collect()
    gc.freeze()  # as the server does after loading (engine/worker.py)
    info = machine_info()
    engine = runtime.engine
    slots = {"target": engine.pool.slots[0]}
    if getattr(engine, "drafter", None) is not None and engine.drafter.pool is not None:
        slots["draft"] = engine.drafter.pool.slots[0]
    ids = prompt_ids(runtime, args.tokens)
    modes = ["rows16", "engine"]
    times: dict[tuple[str, str], list[float]] = {(s, m): [] for s in slots for m in modes}
    with torch.inference_mode():
        for r in range(args.rounds):
            for name in modes if r % 2 == 0 else modes[::-1]:
                with mode(name) as chunk:
                    for s, slot in slots.items():
                        times[(s, name)].append(timed_prefill(slot, ids, chunk))
            print(f"round {r}: " + ", ".join(f"{s} {m} {v[-1]:.2f} s" for (s, m), v in times.items()), flush=True)
        logits = {}
        for name in ("rows16", "engine", "torch512"):
            with mode(name) as chunk:
                logits[name] = last_logits(slots["target"], ids, chunk)
    base = logits["rows16"]

    def distance(name: str) -> dict[str, Any]:
        other = logits[name]
        return {"relative_l2": ((other - base).norm() / base.norm()).item(),
                "top1_same": int(other.argmax()) == int(base.argmax()),
                "top5_same": other.topk(5).indices.tolist() == base.topk(5).indices.tolist()}

    rows, summary = [], {}
    for s in slots:
        old, new = times[(s, "rows16")], times[(s, "engine")]
        ratio = statistics.median(o / n for o, n in zip(old, new))
        summary[s] = {"rows16_s": statistics.median(old), "engine_s": statistics.median(new), "speedup": ratio,
                      "rows16_tokens_per_s": args.tokens / statistics.median(old),
                      "engine_tokens_per_s": args.tokens / statistics.median(new)}
        rows.append([s, f"{statistics.median(old):.2f} s ({args.tokens / statistics.median(old):.0f} tok/s)",
                     f"{statistics.median(new):.2f} s ({args.tokens / statistics.median(new):.0f} tok/s)",
                     f"{ratio:.2f}x", f"{min(o / n for o, n in zip(old, new)):.2f}x / "
                     f"{max(o / n for o, n in zip(old, new)):.2f}x"])
    summary["logits"] = {"engine_vs_rows16": distance("engine"), "torch512_vs_rows16": distance("torch512")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", {"summary": summary, "machine": info, "args": plain_args(args),
                                      "times_s": {f"{s}/{m}": v for (s, m), v in times.items()}})
    d = summary["logits"]
    md = (f"# specfill bench prefill\n\n{info['date']}, {info['cpu']}, kernels {info['kernel_variant']}, "
          f"a {args.tokens}-token prompt, {args.rounds} interleaved rounds, load average at start "
          f"{info['load_average_at_start'][0]:.2f}\n\n"
          + markdown_table(["model", "16-row feeds, exact kernels (before)", "the engine's feeds (wide path)",
                            "speedup (median of rounds)", "lowest / highest round"], rows)
          + f"\n\nTarget logits after the prompt, relative L2 from the 16-row feeds: the engine's feeds "
            f"{d['engine_vs_rows16']['relative_l2']:.4f} (top token {'the same' if d['engine_vs_rows16']['top1_same'] else 'differs'}, "
            f"top 5 {'the same' if d['engine_vs_rows16']['top5_same'] else 'differ'}); the torch layers in 512-row feeds, "
            f"an exact path of before: {d['torch512_vs_rows16']['relative_l2']:.4f}.\n")
    (out / "results.md").write_text(md)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
