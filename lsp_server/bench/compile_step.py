"""Does `torch.compile` (Inductor, CPU) make a one-token decode step faster here?

    python -m lsp_server.bench.compile_step [--model draft|target] [--out DIR]

Loads the models as the server does (default pair, the configured quantization and the
runtime's hooks), fills a KV cache with a 100-token prompt and times one-token steps:

- eager-dynamic: the engine's own step (transformers' DynamicCache, grown and cropped);
- eager-static: a StaticCache of --max-len positions, written in place (no per-step cat);
- compiled-static: the same under torch.compile(dynamic=False), the usual CUDA-graph recipe;
- compiled-dynamic: the engine's DynamicCache under torch.compile(dynamic=True).

For each: seconds of the first call (the compile, cold or from Inductor's disk cache),
median milliseconds per step, and how often its top-1 token equals eager-dynamic's.
Writes DIR/compile_step.json. Run alone on the machine, as every benchmark here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from lsp_server.bench.report import machine_info, write_json

PROMPT_TOKENS = 100
STEPS = 20


def _step(forward: Callable[..., Any], cache: Any, token: torch.Tensor, pos: int, static: bool) -> torch.Tensor:
    kwargs: dict[str, Any] = {"input_ids": token, "cache": cache, "use_cache": True, "logits_to_keep": 1}
    if static:  # a StaticCache is addressed by position; nothing is appended
        where = torch.arange(pos, pos + token.shape[1])
        kwargs.update(cache_position=where, position_ids=where[None])
    return forward(**kwargs).logits[0, -1]


def measure(model: torch.nn.Module, mode: str, max_len: int, reference: list[int] | None) -> dict[str, Any]:
    from transformers import DynamicCache, StaticCache

    static = "static" in mode
    forward = model.forward
    if mode.startswith("compiled"):
        forward = torch.compile(model.forward, dynamic=not static)
    # Fixed ids, so every mode sees the same input.
    prompt = ((torch.arange(PROMPT_TOKENS) * 7 + 1000) % model.config.vocab_size)[None]
    cache = StaticCache(config=model.config, max_cache_len=max_len) if static else DynamicCache(config=model.config)
    _step(model.forward, cache, prompt, 0, static)  # the prompt goes through eager in every mode
    token = prompt[:, -1:]
    t = time.perf_counter()
    first = _step(forward, cache, token, PROMPT_TOKENS, static)
    first_s = time.perf_counter() - t
    tops, times = [int(first.argmax())], []
    for i in range(1, STEPS + 1):
        token = torch.tensor([[tops[-1]]])
        t = time.perf_counter()
        logits = _step(forward, cache, token, PROMPT_TOKENS + i, static)
        times.append(time.perf_counter() - t)
        tops.append(int(logits.argmax()))
    same = None
    if reference is not None:
        same = sum(a == b for a, b in zip(tops, reference)) / len(reference)
    return {"mode": mode, "first_call_s": round(first_s, 3), "step_ms": round(statistics.median(times) * 1e3, 2),
            "step_min_ms": round(min(times) * 1e3, 2), "top1_same_as_eager": same, "tokens": tops}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("draft", "target"), default="draft")
    p.add_argument("--modes", default="eager-dynamic,eager-static,compiled-static,compiled-dynamic")
    p.add_argument("--max-len", type=int, default=1024, help="StaticCache positions")
    p.add_argument("--out", default="bench-results/compile")
    args = p.parse_args(argv)

    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.config import Config

    torch.set_grad_enabled(False)
    runtime = load_runtime(Config(), lambda line: print(f"[load] {line}", flush=True))
    engine = runtime.engine
    model = engine.target if args.model == "target" else engine.drafter.pool.model
    rows: list[dict[str, Any]] = []
    reference = None
    with torch.inference_mode():
        for mode in args.modes.split(","):
            row = measure(model, mode, args.max_len, reference)
            if mode == "eager-dynamic":
                reference = row["tokens"]
            rows.append(row)
            print(f"{mode:18} first call {row['first_call_s']:7.2f} s   step {row['step_ms']:7.2f} ms "
                  f"(min {row['step_min_ms']:.2f})   top-1 same {row['top1_same_as_eager']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "compile_step.json", {
        "machine": machine_info(), "model": args.model, "max_len": args.max_len,
        "prompt_tokens": PROMPT_TOKENS, "steps": STEPS, "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
