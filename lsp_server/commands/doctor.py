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


# Small pieces of everyday code, completed at their end; held-out spots of installed packages
# (bench/quality_spots) join them where those packages are installed.
_PROMPTS = (
    ("def add(a, b):\n    return", ""),
    ("import os\nimport sys\n\n\ndef list_files(root):\n    out = []\n    for name in os.listdir(root):\n",
     "\n    return out\n"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n", "\n    def norm(self):\n"),
)
REAL_SPOTS = 4
BLOCK_TOKENS = 16  # answers of fewer tokens are lines, as in `specfill bench speculation`


def doctor_requests(runtime) -> list:
    """The requests the server would send at each spot: its prompt window and its syntax
    policy (completion/prompts.prepare)."""
    from lsp_server.backends.base import PromptCodec
    from lsp_server.bench.quality_spots import cut_spots
    from lsp_server.config import Config
    from lsp_server.completion.prompts import Cursor, prepare
    from lsp_server.completion.documents import DocumentStore

    spots = list(_PROMPTS) + [(s.prefix, s.suffix) for s in cut_spots(REAL_SPOTS, seed=1, neighbours=0)]
    docs, codec, out = DocumentStore(), PromptCodec(runtime.encode, runtime.fim), []
    for i, (prefix, suffix) in enumerate(spots):
        doc = docs.open(f"file:///doctor/spot{i}.py", "python", 1, prefix + suffix)
        line = prefix.count("\n")
        column = len(prefix[prefix.rfind("\n") + 1:].encode("utf-16-le")) // 2
        out.append(prepare(doc, Cursor(doc.uri, 1, line, column), "utf-16", Config(), codec).request.request)
    return out


def timed_answer(engine, request, mode: str):
    """The request in this speculation mode after a warm at the same cursor, as in the
    editor: both caches loaded (the draft's too), nothing earlier to replay."""
    from dataclasses import replace

    policy = replace(request.policy, mode=mode)
    engine.clear_caches()
    for _ in engine.generate(replace(request, policy=replace(policy, max_new_tokens=0))):
        pass
    return list(engine.generate(replace(request, policy=policy)))[-1]


def speculation_report(runtime) -> list[str]:
    """Answer "should I speculate here?" as the server runs it: warm requests at a few spots
    with the syntax policy, speculation off and adaptive, time to the final answer, lines
    and blocks apart; with the round costs the runtime timed at load."""
    import statistics

    engine = runtime.engine
    costs = engine.costs
    lines = []
    if costs is not None:
        rows = ", ".join(f"{r}: {t * 1e3:.0f}" for r, t in enumerate(costs.target, 1))
        lines.append(f"target feed ms by rows {{{rows}}}")
        lines.append(f"draft step {costs.draft * 1e3:.1f} ms ({costs.draft / costs.target[0]:.2f} of a target step)")
    ratios: dict[str, list[float]] = {"lines": [], "blocks": []}
    same = total = 0
    for request in doctor_requests(runtime):
        off, on = (timed_answer(engine, request, mode) for mode in ("off", "adaptive"))
        kind = "blocks" if off.stats.generated_tokens >= BLOCK_TOKENS else "lines"
        ratios[kind].append(off.stats.total_s / on.stats.total_s if on.stats.total_s else 0.0)
        # the text, not the token ids: a round's accepted tokens can run past the stop rule,
        # which cuts the text (lossless is about what is shown)
        same, total = same + (off.text == on.text), total + 1
    for kind, values in ratios.items():
        if values:
            lines.append(f"warm {kind} ({len(values)} spots): time to the final answer off / adaptive "
                         f"median {statistics.median(values):.2f}x, slower with speculation at {sum(v < 1 for v in values)}")
    lines.append(f"outputs identical with speculation off: {same} of {total}")
    every = ratios["lines"] + ratios["blocks"]
    verdict = "yes" if statistics.median(every) > 1.05 else "no: plain decoding is as fast here"
    cap = engine.options.max_k
    lines.append(f"speculate here? {verdict}. The engine drafts 1..{cap or 'policy k_max'} tokens a round "
                 "with the draft model, up to 15 from the prompt and from earlier requests, whichever "
                 "its measured costs say pays")
    return lines
