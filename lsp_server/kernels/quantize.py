"""Weight-only int8 / int4 replacements for `nn.Linear` on CPU, with bf16 activations.

Decoding one token at batch 1 reads every weight once, so on a CPU its cost is the bytes
of weights per token: bf16 stores 2 bytes per weight, int8 1 (+ a bf16 scale per output
channel), int4 0.5 (+ a bf16 scale and zero per group of `group_size` inputs). The kernels
are torch's own weight-only ops, which dequantize inside the matmul, so activations and
outputs stay bf16:

- int8: `aten._weight_int8pack_mm(x[M, K] bf16, w[N, K] int8, scales[N] bf16)`.
- int4: `aten._weight_int4pack_mm_for_cpu(x[M, K] bf16, packed, group_size, sz[K/g, N, 2])`
  with `packed` from `aten._convert_weight_to_int4pack_for_cpu(codes[N, K] int32, 8)`, a
  layout that depends on the torch version and CPU capability (AVX2 and AVX512 differ).
  The kernel wants N % 16 == 0 and K % group_size == 0; other layers fall back to int8.

Modes: `bf16` (no change), `int8`, `int4`, `mixed`: int4 for each layer whose int4
copy is within `MIXED_INT4_MAX_ERROR` of the original (on the default pair: the tensors
that were Q4_K in the GGUF), int8 for the rest (those that were Q6_K / Q5_0 / Q8_0), and
`w8a8`: int8 weights with int8 activations quantized per row on zentorch's kernel
(`w8a8.W8A8Linear`), whose cost barely grows with the rows of a verify and whose rows are
computed independently (a verify equals single steps bit for bit); every layer, the head
included.

Embeddings stay bf16: a lookup reads one row per token (1,536 values for the target), so
quantizing it would save memory but no time. The untied `lm_head` (151,936 x 1,536, about
13% of the target's weights) is read in full every token, so it is quantized like the rest
unless `include_lm_head=False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from .quant_fit import dequantize_int4, dequantize_int8, quantize_int4, quantize_int8, relative_error
from .w8a8 import W8A8Linear, w8a8_available
from .w8a8 import status as w8a8_status

QuantMode = Literal["bf16", "int8", "int4", "mixed", "w8a8"]
QUANT_MODES: tuple[QuantMode, ...] = ("bf16", "int8", "int4", "mixed", "w8a8")
LayerKind = Literal["int8", "int4", "w8a8"]
INT4_GROUP_SIZES = (32, 64, 128, 256)
# 32 matches the Q4_K sub-blocks of the default GGUF models, which makes their int4 copy
# nearly lossless (see quant_fit); larger groups save 0.06-0.09 bytes per weight but lose that.
DEFAULT_GROUP_SIZE = 32
# In `mixed` mode a layer stays int4 when ||int4 - w|| / ||w|| is at most this: 0.25% for
# Q4_K tensors of the default target, ~7% for tensors that held more bits (int8: ~1.4%).
MIXED_INT4_MAX_ERROR = 0.01
_INT4_N_MULTIPLE = 16
_INNER_K_TILES = 8  # unused by the CPU packing, but must be 2, 4 or 8


@dataclass(frozen=True)
class QuantConfig:
    """What `quantize_model` was asked to do; recorded with cached weights."""

    mode: QuantMode
    group_size: int = DEFAULT_GROUP_SIZE
    include_lm_head: bool = True

    def __post_init__(self) -> None:
        if self.mode not in QUANT_MODES:
            raise ValueError(f"unknown quantization mode {self.mode!r}; use one of {', '.join(QUANT_MODES)}")
        if self.mode in ("int4", "mixed") and self.group_size not in INT4_GROUP_SIZES:
            raise ValueError(f"int4 group size must be one of {INT4_GROUP_SIZES}, got {self.group_size}")

    @classmethod
    def parse(cls, text: str) -> QuantConfig:
        """From a tag: bf16, int8, int4, mixed, int4-g64, mixed-g32-nohead, ..."""
        base = text.strip().removesuffix("-nohead")
        mode, _, group = base.partition("-g")
        try:
            return cls(mode, int(group) if group else DEFAULT_GROUP_SIZE, not text.strip().endswith("-nohead"))  # type: ignore[arg-type]
        except ValueError as err:
            raise ValueError(f"bad quantization {text!r} ({err}); use bf16, int8, int4[-gN], "
                             f"mixed[-gN] or w8a8[-gN], N in {INT4_GROUP_SIZES}, optionally ending in -nohead") from None

    @property
    def tag(self) -> str:
        """A short directory-safe name: bf16, int8, w8a8, int4-g32, mixed-g32, int4-g32-nohead
        (w8a8 has no int4 layers, so a group size given with it changes nothing)."""
        tag = f"{self.mode}-g{self.group_size}" if self.mode in ("int4", "mixed") else self.mode
        if self.mode != "bf16" and not self.include_lm_head:
            tag += "-nohead"
        return tag


def _use_dense(module: nn.Module, x: torch.Tensor) -> bool:
    return module.dense is not None and x.numel() // x.shape[-1] >= module.dense_min_rows


def _flat_bf16(x: torch.Tensor, in_features: int) -> torch.Tensor:
    return x.reshape(-1, in_features).to(torch.bfloat16).contiguous()  # [M, K]


class Int8Linear(nn.Module):
    """`nn.Linear` with int8 weights and per-channel bf16 scales; bf16 in, bf16 out."""

    kind: LayerKind = "int8"
    dense: torch.Tensor | None = None  # see keep_dense_for_prefill
    dense_min_rows = 0

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.empty(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.empty(out_features, dtype=torch.bfloat16))
        self.register_buffer("bias", torch.empty(out_features, dtype=torch.bfloat16) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        module = cls(linear.in_features, linear.out_features, linear.bias is not None)
        module.weight, module.scales = quantize_int8(linear.weight)
        if linear.bias is not None:
            module.bias = linear.bias.detach().to(torch.bfloat16).clone()
        return module

    def dequantized_weight(self) -> torch.Tensor:
        return dequantize_int8(self.weight, self.scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _use_dense(self, x):
            return F.linear(x.to(torch.bfloat16), self.dense, self.bias)
        y = torch.ops.aten._weight_int8pack_mm(_flat_bf16(x, self.in_features), self.weight, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def int4_supported(in_features: int, out_features: int, group_size: int) -> bool:
    """Whether the CPU int4 kernel accepts this shape."""
    return in_features % group_size == 0 and out_features % _INT4_N_MULTIPLE == 0


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """codes [N, K] int32 in 0..15 -> the kernel's private packed layout ([N, K/2] uint8)."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, _INNER_K_TILES)


class Int4Linear(nn.Module):
    """`nn.Linear` with group-wise int4 weights packed for torch's CPU kernel; bf16 in and out."""

    kind: LayerKind = "int4"
    dense: torch.Tensor | None = None  # see keep_dense_for_prefill
    dense_min_rows = 0

    def __init__(self, in_features: int, out_features: int, bias: bool, group_size: int) -> None:
        super().__init__()
        if not int4_supported(in_features, out_features, group_size):
            raise ValueError(f"int4 needs in_features % {group_size} == 0 and out_features % "
                             f"{_INT4_N_MULTIPLE} == 0, got {in_features} -> {out_features}")
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        groups = in_features // group_size
        self.register_buffer("weight", torch.empty(out_features, in_features // 2, dtype=torch.uint8))
        self.register_buffer("scales_and_zeros", torch.empty(groups, out_features, 2, dtype=torch.bfloat16))
        self.register_buffer("bias", torch.empty(out_features, dtype=torch.bfloat16) if bias else None)

    @classmethod
    def from_codes(cls, linear: nn.Linear, codes: torch.Tensor, scales_and_zeros: torch.Tensor,
                   group_size: int) -> Int4Linear:
        module = cls(linear.in_features, linear.out_features, linear.bias is not None, group_size)
        module.weight, module.scales_and_zeros = pack_int4(codes), scales_and_zeros
        if linear.bias is not None:
            module.bias = linear.bias.detach().to(torch.bfloat16).clone()
        return module

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int) -> Int4Linear:
        return cls.from_codes(linear, *quantize_int4(linear.weight, group_size), group_size)

    def dequantized_weight(self) -> torch.Tensor:
        # The packed layout is private to the kernel; multiplying the identity recovers the
        # weight as the kernel sees it (to bf16 output rounding).
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)  # [K, K]
        w_t = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.weight, self.group_size, self.scales_and_zeros)
        return w_t.float().T.contiguous()  # [N, K]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _use_dense(self, x):
            return F.linear(x.to(torch.bfloat16), self.dense, self.bias)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            _flat_bf16(x, self.in_features), self.weight, self.group_size, self.scales_and_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"group_size={self.group_size}, bias={self.bias is not None}")


QuantizedLinear = Int8Linear | Int4Linear | W8A8Linear
QUANTIZED_TYPES = (Int8Linear, Int4Linear, W8A8Linear)


def int4_error(weight: torch.Tensor, group_size: int, rows: int | None = None) -> float:
    """Relative error of the int4 copy of `weight`, or of `rows` rows spread over it."""
    if rows is not None and weight.shape[0] > rows:
        weight = weight[:: weight.shape[0] // rows]
    return relative_error(weight, dequantize_int4(*quantize_int4(weight, group_size), group_size))


# `mixed` first judges a layer on this many rows: a tensor that was not 4-bit in the GGUF
# (7% error) is sent to int8 without fitting all of it, a Q4_K one (0.25%) passes easily.
_MIXED_SAMPLE_ROWS = 128


def quantize_linear(linear: nn.Linear, config: QuantConfig, name: str = "") -> QuantizedLinear:
    """The quantized twin of layer `name` that `config.mode` asks for (int8 where int4 can't go)."""
    if config.mode == "w8a8":
        return W8A8Linear.from_linear(linear)
    if config.mode == "int8" or not int4_supported(linear.in_features, linear.out_features, config.group_size):
        return Int8Linear.from_linear(linear)
    if config.mode == "mixed" and int4_error(linear.weight, config.group_size, _MIXED_SAMPLE_ROWS) > MIXED_INT4_MAX_ERROR:
        return Int8Linear.from_linear(linear)
    codes, scales_and_zeros = quantize_int4(linear.weight, config.group_size)
    if config.mode == "mixed":
        error = relative_error(linear.weight, dequantize_int4(codes, scales_and_zeros, config.group_size))
        if error > MIXED_INT4_MAX_ERROR:
            return Int8Linear.from_linear(linear)
    return Int4Linear.from_codes(linear, codes, scales_and_zeros, config.group_size)


def empty_quantized_linear(linear: nn.Linear, kind: LayerKind, group_size: int) -> QuantizedLinear:
    """An uninitialised twin of `linear`, shaped for `load_state_dict(assign=True)`."""
    bias = linear.bias is not None
    if kind == "int8":
        return Int8Linear(linear.in_features, linear.out_features, bias)
    if kind == "w8a8":
        return W8A8Linear(linear.in_features, linear.out_features, bias)
    return Int4Linear(linear.in_features, linear.out_features, bias, group_size)


# --- whole models ------------------------------------------------------------------------


def _is_tied_to_embedding(model: nn.Module, linear: nn.Linear) -> bool:
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return embedding is not None and linear.weight is getattr(embedding, "weight", None)


def _is_lm_head(model: nn.Module, name: str, module: nn.Module) -> bool:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return module is head or name == "lm_head"


def linear_names(model: nn.Module, config: QuantConfig) -> list[str]:
    """Names of the Linear layers `quantize_model` replaces, in module order.

    A tied lm_head (the embedding matrix itself) is left out: quantizing it would untie it.
    """
    return [name for name, module in model.named_modules()
            if type(module) is nn.Linear and not _is_tied_to_embedding(model, module)
            and (config.include_lm_head or not _is_lm_head(model, name, module))]


def set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def quantize_model(model: nn.Module, mode: QuantMode, group_size: int = DEFAULT_GROUP_SIZE,
                   include_lm_head: bool = True) -> nn.Module:
    """Cast `model` to bf16 and replace its Linear layers in place with int8 / int4 ones.

    Returns the same model object, in eval mode, with `quant_config` set.
    """
    config = QuantConfig(mode, group_size, include_lm_head)
    if config.mode == "w8a8" and not w8a8_available():
        raise ValueError(f"w8a8 needs zentorch's int8 kernel, which can't run here ({w8a8_status().why}); "
                         "use int4-g32 (or `auto`)")
    model.to(torch.bfloat16).eval()
    if config.mode != "bf16":
        with torch.no_grad():
            for name in linear_names(model, config):
                # Replaced one at a time, so each bf16 weight is freed before the next is fitted.
                set_submodule(model, name, quantize_linear(model.get_submodule(name), config, name))
    model.quant_config = config
    return model


def quantized_layers(model: nn.Module) -> dict[str, LayerKind]:
    """Name -> int8 / int4 / w8a8 of every quantized layer, in module order."""
    return {name: m.kind for name, m in model.named_modules() if isinstance(m, QUANTIZED_TYPES)}


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of parameters + buffers: what a decode step reads, and the input embedding.

    A decode step reads one embedding row but every other weight; a tied lm_head is the
    embedding matrix, so then the embedding counts as read per token too.
    """
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = embedding is not None and head is not None and getattr(head, "weight", None) is embedding.weight
    embedding_ids = {id(t) for t in embedding.parameters()} if embedding is not None and not tied else set()
    seen: set[int] = set()
    embedding_bytes = 0
    per_token = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        size = tensor.numel() * tensor.element_size()
        if id(tensor) in embedding_ids:
            embedding_bytes += size
        else:
            per_token += size
    return {"read_per_token": per_token, "embedding_not_read": embedding_bytes}


# --- dense weights for prefills ---------------------------------------------------------------

# From this many rows a bf16 matmul beats the int4 kernel on the 0.5B draft here (2 threads:
# 113-token prefill 340 ms bf16 vs 636 ms int4; 20 tokens 141 vs 116 ms).
DENSE_MIN_ROWS = 32


def linear_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every Linear layer's weight by name: take these before `quantize_model` replaces them."""
    return {name: m.weight for name, m in model.named_modules() if type(m) is nn.Linear}


def keep_dense_for_prefill(model: nn.Module, weights: dict[str, torch.Tensor],
                           min_rows: int = DENSE_MIN_ROWS) -> int:
    """Let quantized layers run inputs of `min_rows`+ rows (prefills) on dense bf16 weights
    (the original ones, taken with `linear_weights` before quantizing).

    Costs the bf16 weights' memory again. For a draft this changes acceptance slightly and
    output not at all. For a target it defines the model: prompts are read with the bf16
    weights, tokens written with the quantized ones; plain and speculative decoding take the
    same path, so speculation still reproduces that model's greedy output. Returns how many
    layers got dense weights.
    """
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, (Int8Linear, Int4Linear)) and name in weights:
            module.dense = weights[name].detach().to(torch.bfloat16)
            module.dense_min_rows = min_rows
            count += 1
    return count
