"""Build the engine from the configuration. Runs on the worker thread (it loads torch)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from lsp_server.config import Config

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """What the server needs from a loaded engine: the engine itself, how to encode
    prompts, and the model's fill-in-the-middle token ids."""

    engine: Any  # lsp_server.engine.speculative.SpeculativeEngine
    encode: Callable[[str], list[int]]
    fim: Any  # lsp_server.prompt.FimTokens
    description: list[str]
    repo: Any = None  # lsp_server.context.cross_file.RepoTokens, None: no repo-level layout

    def generate(self, request: Any, should_abort: Callable[[], bool]):
        """The worker drives anything with this method."""
        return self.engine.generate(request, should_abort)


# What "auto" means on a CPU with bf16 weights, per role: the fastest measured form of each.
# int4-g32 target (`specfill bench engine --quant int4-g32`, 2 cores): 10.9-11.6 tokens/s vs
# 7.85 for a bf16 target with speculation, first token in the server 0.15 s vs 0.30 s (0.12 s
# with packed attention; w8a8 0.14 s, but 15 s to load and 1.4 GB more memory), and
# 99 % of its tokens equal to the bf16 model's (the default target's GGUF is Q4_K anyway).
CPU_AUTO_QUANT = {"target": "int4-g32", "draft": "int4-g32"}
# torch's CPU int4 kernel costs twice as much from 5 rows on, so a verify of an int4 target
# takes at most 3 draft tokens (+ 1): speculation measured 1.04-1.06x plain with k <= 3,
# 0.96x with k <= 12. `mixed` is int4 in most layers, `w8a8` in its down projections.
INT4_TARGET_MAX_K = 3


def resolve_quant(tag: str, role: str, device_type: str, dtype: Any) -> str:
    if tag != "auto":
        return tag
    import torch

    if device_type == "cpu" and dtype == torch.bfloat16:
        return CPU_AUTO_QUANT[role]
    return "bf16"  # CUDA, or fp32 CPUs: torch's weight-only kernels here are CPU + bf16


def apply_quantization(model: Any, tag: str, source: Any, cache_dir: str | None = None) -> None:
    """Quantize once and cache the result on disk under the loader's cache root: a registry
    model under its name, a local directory or GGUF file under a key made from its path (its
    weights' fingerprint still guards against a changed file at the same path)."""
    from lsp_server.models.quant_cache import quantize_for

    quantize_for(model, tag, source.spec, cache_dir=cache_dir)


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's special added tokens: control tokens, never code."""
    return {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}


def load_runtime(config: Config, progress: Callable[[str], None]) -> Runtime:
    from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
    from lsp_server.models.fuse import fuse_projections
    from lsp_server.models.lm_head import flatten_head_input
    from lsp_server.models.loader import load_pair
    from lsp_server.models.packed import pack_linears
    from lsp_server.models.quantize import keep_dense_for_prefill, linear_weights
    from lsp_server.prompt import FimTokens

    m = config.model
    progress(f"loading {m.target} (target) and {m.draft} (draft)")
    pair = load_pair(m.target, m.draft, dtype=m.dtype, device=m.device,
                     cache_dir=m.cacheDir or None)
    options = EngineOptions()
    for role, model, quant in (("target", pair.target, m.quant), ("draft", pair.draft, m.draftQuant)):
        quant = resolve_quant(quant, role, pair.device.type, pair.dtype)
        if quant != "bf16":
            progress(f"{role}: {quant} weights (cached on disk after the first time)")
            dense = linear_weights(model)
            apply_quantization(model, quant, getattr(pair.info, role).source, m.cacheDir or None)
            # The quantized kernels are slow on many rows: prefills (32+ rows) run on the
            # bf16 weights, decode steps and verifies on the quantized ones. For the target
            # that defines the model whose output speculation reproduces: the same path
            # serves plain and speculative decoding.
            keep_dense_for_prefill(model, dense)
            if role == "target" and quant.startswith(("int4", "mixed", "w8a8")):
                options.max_k = INT4_TARGET_MAX_K
        # bf16 layers left (all of them in a bf16 model) get oneDNN-packed copies for the
        # lean steps: the same kernel on a better layout (calls of 1-3 rows padded to 4,
        # models.packed), ~2x faster steps, the bf16 weights' memory again.
        pack = options.lean_steps and pair.device.type == "cpu"
        fuse_projections(model, pack_bf16=pack)  # q/k/v and gate/up in one call each on lean steps
        packed = pack_linears(model) if pack else 0
        if packed:
            progress(f"{role}: bf16 layers packed for oneDNN (faster CPU steps)")
        flatten_head_input(model)  # after quantization, which may replace the head
    special = pair.special_tokens
    missing = [t for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>") if t not in special]
    if missing:
        raise ValueError(
            f"{m.target} has no fill-in-the-middle tokens ({', '.join(missing)}); "
            "choose a FIM-trained code model")
    fim = FimTokens(special["<|fim_prefix|>"], special["<|fim_suffix|>"], special["<|fim_middle|>"])
    # Any special token in the output (a FIM marker, <|fim_pad|>, <|file_sep|>, ...) means
    # the model has left the middle: stop there rather than show it as text.
    stop_ids = set(pair.stop_ids) | {fim.prefix, fim.suffix, fim.middle} | special_token_ids(pair.tokenizer)
    engine = SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, sorted(stop_ids), options)
    engine.token_texts()  # now rather than in the first completion that heals a token
    tokenizer = pair.tokenizer

    def encode(text: str) -> list[int]:
        # Text that merely looks like a special token stays text.
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    lines = pair.info.lines()
    for line in lines:
        progress(line)
    return Runtime(engine, encode, fim, lines, repo_tokens(tokenizer))


def repo_tokens(tokenizer: Any) -> Any:
    """Qwen2.5-Coder's repository-level markers when the tokenizer has them."""
    from lsp_server.context.cross_file import RepoTokens

    added = tokenizer.get_added_vocab()
    if "<|repo_name|>" in added and "<|file_sep|>" in added:
        return RepoTokens(added["<|repo_name|>"], added["<|file_sep|>"])
    return None

