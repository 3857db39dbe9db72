"""Benchmark harness: datasets, runners, reports and plots. `specfill bench <name>`."""

from __future__ import annotations

import importlib
from typing import Any

# name -> module with `add_arguments(parser)` and `run(args) -> int`; imported lazily so
# `specfill --help` does not load torch.
BENCHMARKS = {
    "kernels": ("lsp_server.bench.kernel_speed", "the native kernels over a 1.5B target's matrices, by rows"),
    "engine": ("lsp_server.bench.engine_bench", "tokens/s of specfill vs target alone and transformers"),
    "lsp": ("lsp_server.bench.lsp_bench", "the real server over stdio while typing"),
    "policy": ("lsp_server.bench.policy_bench", "syntax policy vs fixed k, per context class"),
    "peers": ("lsp_server.bench.peers", "specfill vs every llama-server mode on the same GGUF files"),
    "llamacpp": ("lsp_server.bench.versus_llama", "decode and prefill vs llama-bench, interleaved, same threads"),
    "prefill": ("lsp_server.bench.prefill_bench",
                "a long prompt's prefill: the engine's feeds vs the 16-row exact feeds, interleaved; logits moved"),
    "remote": ("lsp_server.bench.remote_bench", "specfill in front of real llama-servers: overhead, cancel, failover"),
    "quality": ("lsp_server.bench.quality", "completion quality on held-out real code, through the server"),
    "context-bound": ("lsp_server.bench.context_bound",
                      "exact match other files' chunks give, up to chunks picked knowing the answer"),
    "agreement": ("lsp_server.bench.agreement", "native kernels' top-1 against the same GGUF dequantized to fp32"),
    "bound": ("lsp_server.bench.bound", "the fastest any draft-length controller could be on a run's prompts"),
    "speculation": ("lsp_server.bench.speculation_session",
                    "speculation off vs adaptive on warm requests at held-out spots, and an editing replay"),
}


def register_benchmarks(subparsers: Any) -> None:
    for name, (module_name, help_text) in BENCHMARKS.items():
        parser = subparsers.add_parser(name, help=help_text)

        def run(args, module_name=module_name):
            return importlib.import_module(module_name).run(args)

        # A benchmark listed here whose module is gone is a broken install: fail, never hide it.
        importlib.import_module(module_name).add_arguments(parser)
        parser.set_defaults(bench_func=run)
