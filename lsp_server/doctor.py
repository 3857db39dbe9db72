"""`specfill doctor`: versions, model files and their verification, memory, a smoke decode."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
import time

_PACKAGES = ("torch", "transformers", "gguf", "pygls", "lsprotocol", "tree-sitter",
             "tree-sitter-python")


def doctor(args: argparse.Namespace) -> int:
    from lsp_server.models.cli_models import doctor_report

    print(f"python {platform.python_version()} on {platform.machine()}")
    for name in _PACKAGES:
        try:
            print(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            print(f"{name}: NOT INSTALLED")
    import torch

    print(f"torch threads {torch.get_num_threads()}, cuda available: {torch.cuda.is_available()}")
    print("\n".join(doctor_report(args.cache_dir)))
    if args.no_decode:
        return 0
    from lsp_server.config import Config, ModelConfig
    from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule
    from lsp_server.runtime import load_runtime

    try:
        runtime = load_runtime(Config(model=ModelConfig(cacheDir=args.cache_dir or "")), print)
    except Exception as exc:  # doctor reports, it does not crash
        print(f"model load FAILED: {type(exc).__name__}: {exc}")
        return 1
    prompt = [runtime.fim.prefix, *runtime.encode("def add(a, b):\n    return"),
              runtime.fim.suffix, runtime.fim.middle]
    policy = DraftPolicy(max_new_tokens=16, stop=StopRule("line"))
    t = time.perf_counter()
    final = list(runtime.generate(CompletionRequest("doctor", tuple(prompt), policy), lambda: False))[-1]
    s = final.stats
    print(f"smoke decode: {final.text!r} in {time.perf_counter() - t:.2f} s "
          f"({s.generated_tokens} tokens, acceptance {s.acceptance_rate:.0%}, reason {final.reason})")
    return 0
