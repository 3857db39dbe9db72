"""`specfill bench agreement`: how often the native kernels' top-1 token is the one the
GGUF file's own weights give, dequantized (issue 24: forced top-1 agreement >= 99.5 %).

The native target (the file's blocks on specfill's kernels, each activation row quantized
to int8 inside the product) decodes each prompt greedily, one step at a time, on the slots
the engine decodes with. The reference is the same file dequantized to fp32 (the reference
dequantizer, gguf.quants' values bit for bit) in transformers' own forward, with fp32
activations: it reads the prompt and that continuation in one pass. At every generated
position the two top-1 tokens are compared. Forced: both read the same tokens, so one
disagreement does not derail what follows. A disagreement where the reference's own top-2
logits lie within NEAR_TIE is counted apart, as a near-tie that float rounding alone flips.

Memory: the fp32 reference of the 1.5B target holds ~7 GB. Output: DIR/results.json
(`summary` first) and DIR/results.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lsp_server.bench.datasets import load_prompts
from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json

NEAR_TIE = 0.05  # logits: the tolerance bench engine uses for its near-ties too


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", choices=["humaneval", "stdlib-fim"], default="humaneval")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--tokens", type=int, default=64, help="greedy tokens generated (and compared) a prompt")
    p.add_argument("--out", default="bench-results/agreement")


def dequantized_twin(model: nn.Module) -> nn.Module:
    """A plain fp32 transformers model of `model`'s architecture (kernels.gguf: layers on the
    file's blocks) holding its weights dequantized: the file's model as floats."""
    from transformers import AutoModelForCausalLM

    from lsp_server.kernels import native
    from lsp_server.kernels.gguf import GGUFEmbedding, GGUFLinear

    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
    for name, module in model.named_modules():
        if isinstance(module, GGUFLinear):
            dense = twin.get_submodule(name)
            dense.weight = nn.Parameter(module.dequantized_weight(), requires_grad=False)  # [N, K]
            if module.bias is not None:
                dense.bias = nn.Parameter(module.bias.clone(), requires_grad=False)
        elif isinstance(module, GGUFEmbedding):
            rows = native.dequantize(module.type_id, module.blocks, module.embedding_dim)
            twin.get_submodule(name).weight = nn.Parameter(rows, requires_grad=False)
    for name, param in model.named_parameters():  # norms: the file's floats
        owner, _, attr = name.rpartition(".")
        setattr(twin.get_submodule(owner), attr, nn.Parameter(param.detach().clone(), requires_grad=False))
    twin.model.rotary_emb = type(twin.model.rotary_emb)(config=model.config)  # its buffers were on meta
    left = [n for n, t in [*twin.named_parameters(), *twin.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"the reference lacks weights for {', '.join(left[:4])}")
    return twin.eval()


def compare(native_tokens: list[int], reference_logits: torch.Tensor) -> dict[str, Any]:
    """reference_logits [n, V]: the reference's logits before each of the n native tokens."""
    top = reference_logits.max(dim=-1)
    agree = disagree_near_tie = 0
    margins = []  # where they differ: how far below the reference's top-1 the native token lies
    for i, token in enumerate(native_tokens):
        if int(top.indices[i]) == token:
            agree += 1
            continue
        margins.append(round(float(top.values[i] - reference_logits[i, token]), 4))
        if margins[-1] <= NEAR_TIE:
            disagree_near_tie += 1
    return {"positions": len(native_tokens), "agree": agree, "near_ties": disagree_near_tie, "margins": margins}


def run(args: argparse.Namespace) -> int:
    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.config import Config, ModelConfig
    from lsp_server.context.prompt import ContextBudget, build_fim_prompt
    from lsp_server.kernels import native

    if not native.available():
        print(f"bench agreement needs the native kernels: {native.why_unavailable()}")
        return 2
    runtime = load_runtime(Config(model=ModelConfig(quant="gguf", draftQuant="gguf")),
                           lambda line: print(f"[load] {line}", flush=True))
    target = runtime.engine.target
    print("[load] the fp32 reference: the same GGUF file, dequantized", flush=True)
    reference = dequantized_twin(target)
    slot = runtime.engine.pool.slots[0]
    rows = []
    started = time.perf_counter()
    with torch.inference_mode():
        for prompt in load_prompts(args.prompts, args.limit):
            ids = build_fim_prompt(prompt.prefix, prompt.suffix, runtime.encode, runtime.fim,
                                   ContextBudget(), "psm").ids
            slot.reset()
            _, logits = slot.extend(ids)
            tokens = []
            for _ in range(args.tokens):  # the engine's own one-row steps
                tokens.append(int(logits.argmax()))
                logits = slot.feed(tokens[-1:], all_logits=False)[-1]
            full = reference(input_ids=torch.tensor([ids + tokens[:-1]])).logits[0]  # [T, V]
            row = {"name": prompt.name, "prompt_tokens": len(ids), **compare(tokens, full[len(ids) - 1:])}
            rows.append(row)
            print(f"{prompt.name}: {row['agree']}/{row['positions']} agree, {row['near_ties']} near-ties", flush=True)
    positions = sum(r["positions"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    near = sum(r["near_ties"] for r in rows)
    summary = {"prompts": len(rows), "positions": positions, "top1_agreement": agree / positions if positions else 0.0,
               "top1_agreement_counting_near_ties": (agree + near) / positions if positions else 0.0,
               "near_tie_logits": NEAR_TIE,
               "disagreement_margins": sorted(m for r in rows for m in r["margins"]),
               "kernel_variant": native.variant(), "seconds": time.perf_counter() - started}
    out = Path(args.out)
    write_json(out / "results.json", {"summary": summary, "machine": machine_info(), "args": plain_args(args),
                                      "rows": rows})
    lines = ["# specfill bench agreement", "",
             f"{args.prompts}, {len(rows)} prompts, {args.tokens} greedy tokens each; the native target against "
             "the same GGUF dequantized to fp32 (transformers' forward), forced on the native tokens", "",
             markdown_table(["prompts", "positions", "top-1 agreement", "with near-ties (≤ "
                             f"{NEAR_TIE} logits) counted as agreeing"],
                            [[len(rows), positions, f"{summary['top1_agreement']:.2%}",
                              f"{summary['top1_agreement_counting_near_ties']:.2%}"]]), "",
             "Where they differ, the reference's top-1 logit minus its logit of the native token: "
             + (", ".join(f"{m:.3f}" for m in summary["disagreement_margins"]) or "none")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0
