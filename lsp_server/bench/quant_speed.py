"""Speed and fidelity of bf16 / int8 / int4 weights for the default pair on this CPU.

    OMP_WAIT_POLICY=PASSIVE nice -n 10 python -m lsp_server.bench.quant_speed [--modes bf16,int4-g32]

For each model and mode: first-time quantization, load time from the cache (bf16 load +
cached quantized layers), the latency (median and min) of one forward over 1 and over 5 new
tokens with a KV cache after a ~100-token prompt, plain greedy decoding speed, and agreement
with bf16 greedy output over HumanEval prompts (means over prompts):

- prefix: identical tokens before the first divergence / reference length;
- forced: fed bf16's own greedy continuation, how often the quantized model's top-1 token
  equals bf16's (what a speculative verifier sees);
- div/tie: prompts whose output differs from bf16's / of those, how many part where bf16's
  own top-2 logits were within NEAR_TIE (a near-tie that rounding alone can flip).

One model is in memory at a time. Writes DIR/quant_speed.json and prints a table. On a
shared CPU set OMP_WAIT_POLICY=PASSIVE: spinning OpenMP threads made 2-thread forwards
up to 10x slower whenever another process held a core.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from lsp_server.bench.datasets import humaneval
from lsp_server.engine.types import common_prefix_len
from lsp_server.kernels.quant_cache import apply_quant, cache_matches, quant_dir, read_meta, source_fingerprint
from lsp_server.kernels.quantize import QuantConfig, quantized_layers, weight_bytes
from lsp_server.models.fetch import ensure_weights
from lsp_server.models.registry import DEFAULT_PAIR, ModelPaths, get_model, get_pair, resolve_cache_dir

STOP_IDS = (151643, 151645)  # <|endoftext|>, <|im_end|>
# As the engine benchmark's tie tolerance: a divergence where bf16's own top-1 and top-2
# logits are closer than this is a near-tie that kernel rounding alone can flip.
NEAR_TIE = 0.5


@dataclass
class ModeResult:
    model: str
    mode: str
    quantize_s: float | None  # first-time quantization + cache write; None for bf16
    load_s: float  # a fresh start: bf16 safetensors load + cached quantized layers
    load_quant_s: float  # the cached-layers part of load_s
    read_mb_per_token: float
    step1_ms: float  # median
    step5_ms: float
    step1_min_ms: float
    step5_min_ms: float
    decode_tok_s: float
    prefix_agreement: float | None = None  # mean over prompts
    prefix_agreement_median: float | None = None
    teacher_forced_agreement: float | None = None  # mean over prompts
    teacher_forced_agreement_median: float | None = None
    divergences: int | None = None  # prompts whose greedy output differs from bf16's
    near_tie_divergences: int | None = None  # ... where bf16's top-2 logits were < NEAR_TIE apart
    self_teacher_forced: float | None = None  # bf16 only: see Reference.self_agreement
    layer_kinds: dict[str, int] = field(default_factory=dict)  # int8 / int4 -> number of layers
    load_average_1min: float = 0.0  # when this mode finished
    per_prompt: list[dict[str, float]] = field(default_factory=list)


def parse_mode(text: str) -> QuantConfig:
    try:
        return QuantConfig.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def spread_humaneval(count: int) -> list[str]:
    """`count` HumanEval prompts spread evenly over the 164 problems."""
    problems = humaneval(10_000)
    step = max(1, len(problems) // count)
    return [p.prefix for p in problems[::step][:count]]


def load_bf16(hf_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.bfloat16)
    return model.eval().requires_grad_(False)


def new_cache(model: torch.nn.Module):  # -> DynamicCache
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


@torch.inference_mode()
def step_latency_ms(model: torch.nn.Module, prompt: torch.Tensor, n_tokens: int, repeats: int) -> tuple[float, float]:
    """(median, min) ms of one forward over `n_tokens` new tokens after `prompt`, KV cache reused.

    On a shared CPU the minimum is the better estimate of the uncontended cost.
    """
    cache = new_cache(model)
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    new = prompt[:, -n_tokens:]  # [1, n]: any real tokens will do
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        model(input_ids=new, past_key_values=cache, use_cache=True)
        times.append(time.perf_counter() - t)
        cache.crop(-n_tokens)  # a negative count drops that many tokens
    timed = times[1:]  # the first call warms kernels up
    return 1000 * statistics.median(timed), 1000 * min(timed)


@torch.inference_mode()
def greedy(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> tuple[list[int], float]:
    """Greedy continuation (stopping after a stop id) and decode tokens/s after the prefill."""
    cache = new_cache(model)
    logits = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
    tokens = [int(logits[0, -1].argmax())]
    t = time.perf_counter()
    while len(tokens) < new_tokens and tokens[-1] not in STOP_IDS:
        step = torch.tensor([[tokens[-1]]])
        logits = model(input_ids=step, past_key_values=cache, use_cache=True).logits
        tokens.append(int(logits[0, -1].argmax()))
    elapsed = time.perf_counter() - t
    return tokens, (len(tokens) - 1) / elapsed if len(tokens) > 1 else 0.0


@dataclass
class Reference:
    """bf16's greedy continuation of one prompt, and its top-1 minus top-2 logit at each step."""

    tokens: list[int]
    margins: list[float]
    # bf16 fed its own output in one batched forward: how often its top-1 equals what it
    # chose token by token. Below 1.0 where the batched and 1-row kernels round differently.
    self_agreement: float


@torch.inference_mode()
def forced_logits(model: torch.nn.Module, prompt: torch.Tensor, continuation: list[int]) -> torch.Tensor:
    """Logits [R, V] predicting each token of `continuation`, fed the continuation itself."""
    ids = torch.cat([prompt, torch.tensor([continuation])], dim=1)  # [1, P + R]
    return model(input_ids=ids, logits_to_keep=len(continuation) + 1).logits[0, :-1].float()


def make_reference(model: torch.nn.Module, prompt: torch.Tensor, tokens: list[int]) -> Reference:
    logits = forced_logits(model, prompt, tokens)  # [R, V]
    top2 = logits.topk(2, dim=-1).values  # [R, 2]
    self_agreement = (logits.argmax(dim=-1) == torch.tensor(tokens)).float().mean().item()
    return Reference(tokens, (top2[:, 0] - top2[:, 1]).tolist(), self_agreement)


def teacher_forced_agreement(model: torch.nn.Module, prompt: torch.Tensor, reference: list[int]) -> float:
    logits = forced_logits(model, prompt, reference)
    return (logits.argmax(dim=-1) == torch.tensor(reference)).float().mean().item()


def compare(model: torch.nn.Module, prompt: torch.Tensor, tokens: list[int], ref: Reference) -> dict[str, float | None]:
    same = common_prefix_len(tokens, ref.tokens)
    diverged = same < min(len(tokens), len(ref.tokens))
    return {"prefix": same / len(ref.tokens),
            "teacher_forced": teacher_forced_agreement(model, prompt, ref.tokens),
            # bf16's own top-1 minus top-2 logit where the outputs part: small = a near-tie
            "bf16_margin_at_divergence": ref.margins[same] if diverged else None}


def measure_mode(name: str, hf_dir: Path, config: QuantConfig, prompts: list[torch.Tensor],
                 references: list[Reference] | None, args: argparse.Namespace) -> tuple[ModeResult, list[Reference]]:
    quantize_s = None
    if config.mode != "bf16":
        model = load_bf16(hf_dir)
        model_fingerprint = source_fingerprint(model, config)
        if not cache_matches(read_meta(quant_dir(name, config)), config, model_fingerprint):
            t = time.perf_counter()
            apply_quant(model, config.mode, name, config.group_size, config.include_lm_head)
            quantize_s = time.perf_counter() - t
        del model
        gc.collect()
    t = time.perf_counter()
    model = load_bf16(hf_dir)
    t_quant = time.perf_counter()
    apply_quant(model, config.mode, name, config.group_size, config.include_lm_head)
    load_quant_s = time.perf_counter() - t_quant
    load_s = time.perf_counter() - t

    latency_prompt = prompts[0][:, :100]
    step1, step1_min = step_latency_ms(model, latency_prompt, 1, args.repeats)
    step5, step5_min = step_latency_ms(model, latency_prompt, 5, args.repeats)
    outputs, speeds, per_prompt = [], [], []
    for i, prompt in enumerate(prompts):
        tokens, tok_s = greedy(model, prompt, args.new_tokens)
        speeds.append(tok_s)
        if references is None:
            outputs.append(make_reference(model, prompt, tokens))
            per_prompt.append({"self_teacher_forced": outputs[-1].self_agreement})
        else:
            per_prompt.append(compare(model, prompt, tokens, references[i]))
    result = ModeResult(
        model=name, mode=config.tag, quantize_s=quantize_s, load_s=load_s, load_quant_s=load_quant_s,
        read_mb_per_token=weight_bytes(model)["read_per_token"] / 1e6,
        step1_ms=step1, step5_ms=step5, step1_min_ms=step1_min, step5_min_ms=step5_min, decode_tok_s=statistics.median(speeds), per_prompt=per_prompt,
        layer_kinds=dict(Counter(quantized_layers(model).values())), load_average_1min=os.getloadavg()[0])
    if references is None:
        result.self_teacher_forced = statistics.mean(p["self_teacher_forced"] for p in per_prompt)
    elif per_prompt:
        result.prefix_agreement = statistics.mean(p["prefix"] for p in per_prompt)
        result.prefix_agreement_median = statistics.median(p["prefix"] for p in per_prompt)
        result.teacher_forced_agreement = statistics.mean(p["teacher_forced"] for p in per_prompt)
        result.teacher_forced_agreement_median = statistics.median(p["teacher_forced"] for p in per_prompt)
        result.divergences = sum(p["bf16_margin_at_divergence"] is not None for p in per_prompt)
        result.near_tie_divergences = sum((p["bf16_margin_at_divergence"] or NEAR_TIE) < NEAR_TIE for p in per_prompt)
    del model
    gc.collect()
    return result, outputs


def format_row(r: ModeResult) -> str:
    agree = (f"{r.prefix_agreement:6.1%} {r.teacher_forced_agreement:6.1%} {r.divergences:>2}/{r.near_tie_divergences:<2}"
             if r.prefix_agreement is not None else f"{'(ref)':>6} {r.self_teacher_forced or 0:6.1%} {'':5}")
    quant = f"{r.quantize_s:6.1f}" if r.quantize_s is not None else f"{'-':>6}"
    return (f"{r.model:20} {r.mode:16} {r.read_mb_per_token:7.0f} {r.step1_ms:6.0f}/{r.step1_min_ms:<5.0f} "
            f"{r.step5_ms:6.0f}/{r.step5_min_ms:<5.0f} {r.decode_tok_s:6.1f} {r.load_s:6.1f} {r.load_quant_s:6.2f} "
            f"{quant} {agree} {r.load_average_1min:5.1f}")


HEADER = (f"{'model':20} {'mode':16} {'MB/tok':>7} {'1 tok ms med/min':>16} {'5 tok ms med/min':>16} "
          f"{'tok/s':>6} {'load s':>6} {'quant':>6} {'1st q':>6} {'prefix':>6} {'forced':>6} {'div/tie':>5} {'load':>5}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lsp_server.bench.quant_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    pair = get_pair(DEFAULT_PAIR)
    parser.add_argument("--models", default=f"{pair.target},{pair.draft}", help="registry names, comma-separated")
    parser.add_argument("--modes", default="bf16,int8,int4-g32,int4-g128,mixed-g32",
                        help="bf16, int8, int4-gN, mixed-gN; add -nohead to keep lm_head bf16")
    parser.add_argument("--prompts", type=int, default=5, help="HumanEval prompts for agreement")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15, help="timed forwards per latency median")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/quant"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [parse_mode(m.strip()) for m in args.modes.split(",") if m.strip()]
    if configs[0].mode != "bf16":
        configs.insert(0, QuantConfig("bf16"))  # the reference for agreement
    cache = resolve_cache_dir()

    from transformers import AutoTokenizer

    names = [m.strip() for m in args.models.split(",") if m.strip()]
    for name in names:
        ensure_weights(get_model(name), cache)  # bf16 is what this compares against
    hf_dirs = {name: ModelPaths.of(cache, get_model(name)).hf for name in names}
    tokenizer = AutoTokenizer.from_pretrained(str(hf_dirs[names[0]]))
    prompts = [torch.tensor([tokenizer.encode(p)]) for p in spread_humaneval(args.prompts)]

    results: list[ModeResult] = []
    load_before = os.getloadavg()
    print(HEADER, flush=True)
    for name in names:
        references = None
        for config in configs:
            result, outputs = measure_mode(name, hf_dirs[name], config, prompts, references, args)
            references = references or outputs
            results.append(result)
            print(format_row(result), flush=True)
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "prompts": len(prompts), "new_tokens": args.new_tokens,
              "results": [asdict(r) for r in results]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quant_speed.json").write_text(json.dumps(report, indent=1))
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}; "
          f"wrote {args.out / 'quant_speed.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
