"""`specfill doctor`: versions, model files and their verification, which kernels run and
why, memory with the models ready, and whether speculation pays on this machine."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform

_PACKAGES = ("torch", "transformers", "gguf", "pygls", "lsprotocol", "tree-sitter",
             "tree-sitter-python")


def doctor(args: argparse.Namespace) -> int:
    from lsp_server.commands.models import doctor_report

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
    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.config import Config, ModelConfig

    try:
        runtime = load_runtime(Config(model=ModelConfig(cacheDir=args.cache_dir or "")), print)
    except Exception as exc:  # doctor reports, it does not crash
        print(f"model load FAILED: {type(exc).__name__}: {exc}")
        return 1
    import psutil

    print(f"process RSS with both models ready: {psutil.Process().memory_info().rss / 1e9:.2f} GB")
    for line in speculation_report(runtime):
        print(line)
    return 0


# Small pieces of everyday code to decode with and without speculation.
_PROMPTS = (
    ("def add(a, b):\n    return", ""),
    ("import os\nimport sys\n\n\ndef list_files(root):\n    out = []\n    for name in os.listdir(root):\n",
     "\n    return out\n"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n", "\n    def norm(self):\n"),
)


def speculation_report(runtime) -> list[str]:
    """Answer "should I speculate here?" from measurements on this machine: the round costs
    the runtime timed at load, the draft's acceptance on a few code prompts, the speedup
    those predict and the one measured, and what the engine will do."""
    from lsp_server.engine.costs import best_k, predicted_speedup
    from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule

    engine = runtime.engine
    costs = engine.costs
    lines = []
    if costs is not None:
        rows = ", ".join(f"{r}: {t * 1e3:.0f}" for r, t in enumerate(costs.target, 1))
        lines.append(f"target feed ms by rows {{{rows}}}")
        lines.append(f"draft step {costs.draft * 1e3:.1f} ms ({costs.draft / costs.target[0]:.2f} of a target step)")
    seconds = {"off": 0.0, "adaptive": 0.0}
    tokens = {"off": 0, "adaptive": 0}
    drafted = accepted = 0
    for prefix, suffix in _PROMPTS:
        ids = [runtime.fim.prefix, *runtime.encode(prefix), runtime.fim.suffix, *runtime.encode(suffix),
               runtime.fim.middle]
        for mode in ("off", "adaptive"):
            engine.clear_caches()  # cold, both ways
            policy = DraftPolicy(context="doctor", max_new_tokens=48, stop=StopRule("none"), mode=mode,
                                 k_max=max(1, engine.options.max_k or 8))
            final = list(engine.generate(CompletionRequest("doctor", tuple(ids), policy)))[-1]
            s = final.stats
            seconds[mode] += s.total_s - s.prefill_s
            tokens[mode] += max(0, s.generated_tokens - 1)  # the first token comes from the prefill
            if mode == "adaptive":
                drafted, accepted = drafted + s.drafted, accepted + s.accepted
    acceptance = accepted / drafted if drafted else 0.0
    rate = {m: tokens[m] / seconds[m] if seconds[m] else 0.0 for m in seconds}
    measured = rate["adaptive"] / rate["off"] if rate["off"] else 0.0
    lines.append(f"decoding after the prefill, {len(_PROMPTS)} code prompts: plain {rate['off']:.1f} tokens/s, "
                 f"speculative {rate['adaptive']:.1f} tokens/s ({measured:.2f}x measured), "
                 f"draft acceptance {acceptance:.0%}")
    if costs is not None:
        k = best_k(costs, acceptance)
        predicted = predicted_speedup(costs, k, acceptance)
        lines.append(f"predicted from the costs at that acceptance: k = {k} pays best, {predicted:.2f}x")
    cap = engine.options.max_k
    verdict = "yes" if measured > 1.05 else "no: plain decoding is as fast here"
    lines.append(f"speculate here? {verdict}. The engine drafts 1..{cap or 'policy k_max'} tokens a round "
                 "(the syntax policy picks within that) and decodes plainly where the target is unsure")
    return lines
