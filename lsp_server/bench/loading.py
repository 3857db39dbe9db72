"""How a benchmark loads the engine: the pair as the server loads it, with one thread count
that reaches whatever does the work.

`--threads` used to call `torch.set_num_threads` only; on the native kernels torch runs the
small ops on one thread and the kernels' own pool does the products, and `load_runtime` reset
that pool to every CPU. Here the count goes into `model.threads`, which the load applies to
the pool (torch's threads for dense weights), and is read back from what runs."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Mapping


def bench_threads(wanted: int) -> int:
    """The thread count a benchmark gives every side: `wanted`, or (0) every CPU it may use."""
    return wanted or len(os.sched_getaffinity(0))


def bench_model(settings: Mapping[str, Any]) -> Any:
    """The server's model settings from a benchmark's arguments (or a source run's)."""
    from lsp_server.config import ModelConfig

    return ModelConfig(dtype=settings["dtype"], device=settings["device"], quant=settings["quant"],
                       draftQuant=settings["draft_quant"],
                       **{k: settings[k] for k in ("target", "draft") if settings.get(k)})


def load_bench_runtime(model: Any, threads: int) -> tuple[Any, int]:
    """The loaded Runtime and the threads its matrix products run on (native pool or torch)."""
    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.config import Config

    runtime = load_runtime(Config(model=replace(model, threads=threads)),
                           lambda line: print(f"[load] {line}", flush=True))
    used = runtime.apply_threads(threads)
    print(f"[load] threads: {used} ({'specfill native pool' if runtime.native else 'torch'})", flush=True)
    return runtime, used
