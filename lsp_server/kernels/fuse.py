"""One quantized matrix product where a decoder layer runs several on the same input.

Attention's q, k and v projections read the same normalised input, and so do the MLP's
gate and up projections. With quantized weights each call has a fixed cost beside reading
its weights (the W8A8 kernel quantizes its input and its threads meet per call; torch's
int4 kernel less so), so one call on the weights stacked by output rows saves two calls
per layer. Every output channel is its own dot product over the same input, so the fused
call computes the same numbers bit for bit (checked per layer at load, and in
tests/unit/test_kernels_fuse.py); the layers keep their own modules for transformers' forward, and
`lean_step` uses the fused ones.

The same holds for bf16 layers packed for oneDNN (`kernels.packed`): one packed copy of the
stacked weights, in place of the layers' separate packed copies.

Memory: packed int4 rows are self-contained in blocks, so the layers' int4 weights become row
views of the fused weight (nothing added but the small scales); W8A8 weights are plain
[N, K] int8, so the same holds for them. A W8A8 fused layer is checked on its own
(`w8a8.check`: its dequantized product, rows independent), not against its parts: calling
a part would make zentorch cache a reordered copy of that part's weight for good (see
w8a8.py), and its per-row input quantization does not depend on the output width, so each
output channel is the same dot product either way (tests/unit/test_kernels_fuse.py checks that).

GGUF layers on the native kernels (`kernels.gguf`) fuse where their block types agree: gate
and up lie back to back in the file, so theirs is a view; q/k/v are stacked in a copy.

Prefills of `dense_min_rows`+ rows keep using each layer's bf16 copy
(quantize.keep_dense_for_prefill): the fused module is used below that (`Fused.max_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from . import packed
from .gguf import GGUFLinear, fuse_rows
from .quantize import Int4Linear
from . import w8a8
from .w8a8 import W8A8Linear

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class Fused:
    """A fused module, the output widths of the layers it stands for, and the most
    rows it serves (more rows: the layers' own modules, which hold the dense copies)."""

    module: Callable[[torch.Tensor], torch.Tensor]
    widths: tuple[int, ...]
    max_rows: float

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.module(x).split(self.widths, dim=-1)


def _fuse_int4(parts: list[Int4Linear]) -> Int4Linear:
    first = parts[0]
    has_bias = first.bias is not None
    out = sum(p.out_features for p in parts)
    fused = Int4Linear(first.in_features, out, has_bias, first.group_size)
    fused.weight = torch.cat([p.weight for p in parts])
    fused.scales_and_zeros = torch.cat([p.scales_and_zeros for p in parts], dim=1)
    if has_bias:
        fused.bias = torch.cat([p.bias for p in parts])
    return fused


def _share_int4(fused: Int4Linear, parts: list[Int4Linear]) -> None:
    """The layers' own packed weights become row views of the fused one: no second copy."""
    offset = 0
    for p in parts:
        p.weight = fused.weight[offset:offset + p.out_features]
        offset += p.out_features


def _same_numbers(fused: Callable[[torch.Tensor], torch.Tensor], parts: list[nn.Module]) -> bool:
    """Whether the fused layer computes each part's outputs bit for bit. Packed int4 rows
    concatenate only in whole blocks of the kernel's layout (64 rows with AVX-512 here; the
    layout differs by CPU), so this is checked on the machine rather than assumed."""
    x = torch.randn(2, parts[0].in_features, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.inference_mode():
        got = fused(x).split([p.out_features for p in parts], dim=-1)
        return all(torch.equal(g, p(x)) for g, p in zip(got, parts))


def _adjacent_rows(weights: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
    """The parts' rows as one view where they already lie back to back in one buffer (the
    W8A8 cache file's layout: `quant_cache`), else None."""
    first = weights[0]
    if not all(w.is_contiguous() and w.dtype == first.dtype and w.shape[1:] == first.shape[1:] for w in weights):
        return None
    if any(w.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() for w in weights):
        return None
    step = first.element_size()
    if any(a.data_ptr() + a.numel() * step != b.data_ptr() for a, b in zip(weights, weights[1:])):
        return None
    rows = sum(w.shape[0] for w in weights)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]))


def _fuse_w8a8(parts: list[W8A8Linear]) -> W8A8Linear | None:
    """One layer of the parts' stacked int8 rows; the parts' weights become row views of it
    (they are already where they lie next to each other: no copy then)."""
    weights, scales = zip(*(p.unpacked() for p in parts))
    bias = torch.cat([p.bias for p in parts]) if parts[0].bias is not None else None
    stacked = _adjacent_rows(weights)
    fused = W8A8Linear.from_int8(torch.cat(weights) if stacked is None else stacked, torch.cat(scales), bias)
    if w8a8.check(fused) is not None:
        return None
    offset = 0
    for p in parts:
        rows = slice(offset, offset + p.out_features)
        p.weight, p.scales = fused.weight[rows], fused.scales[rows]
        if p.bias is not None:
            p.bias = fused.bias[rows]
        offset += p.out_features
    return fused


def _fuse_packed(parts: list[nn.Linear]) -> packed.PackedLinear | None:
    bias = torch.cat([p.bias for p in parts]) if parts[0].bias is not None else None
    return packed.pack(torch.cat([p.weight for p in parts]), bias)


def fuse(parts: list[nn.Module], pack_bf16: bool = False) -> Fused | None:
    """The fused form of layers that read one input, or None where they can't fuse (mixed
    kinds, group sizes or biases, bf16 layers unless `pack_bf16` asks for a oneDNN-packed
    fused copy, or a fused layer that would not compute the same numbers)."""
    kinds = {type(p) for p in parts}
    if kinds == {GGUFLinear}:
        module = fuse_rows(parts)
        return Fused(module, tuple(p.out_features for p in parts), float("inf")) if module else None
    if kinds not in ({Int4Linear}, {W8A8Linear}, {nn.Linear}):
        return None
    if len({p.in_features for p in parts}) != 1 or len({p.bias is None for p in parts}) != 1:
        return None
    widths = tuple(p.out_features for p in parts)
    if kinds == {nn.Linear}:
        if not pack_bf16 or not all(packed.packable(p) for p in parts):
            return None
        module = _fuse_packed(parts)
        # Checked on the kernel itself: a padded call (packed.PAD_TO) computes its rows as
        # part of a larger call, and then agrees with neither form unpadded.
        if module is None or not _same_numbers(module.raw, parts):
            return None
        for p in parts:  # the fused copy serves every row count: packed.pack_linears skips these
            setattr(p, packed.ATTR, None)
        return Fused(module, widths, float("inf"))
    if kinds == {Int4Linear}:
        if len({p.group_size for p in parts}) != 1:
            return None
        module = _fuse_int4(parts)
        if not _same_numbers(module, parts):
            return None
        _share_int4(module, parts)
        dense = [p.dense_min_rows for p in parts if p.dense is not None]
        return Fused(module, widths, min(dense) - 1 if dense else float("inf"))
    module = _fuse_w8a8(parts)
    return Fused(module, widths, float("inf")) if module is not None else None


def fuse_projections(model: nn.Module, pack_bf16: bool = False) -> int:
    """Give each decoder layer `self_attn._specfill_qkv` and `mlp._specfill_gate_up` where
    its projections fuse (plain attributes, not submodules: state dicts and weight counts
    stay as they were). Call after quantizing and keep_dense_for_prefill; with `pack_bf16`,
    bf16 layers fuse into oneDNN-packed copies (call packed.pack_linears after it for the
    rest: packing the parts first would be wasted work). Returns how many fusions were made."""
    inner = getattr(model, "model", None)
    made = 0
    for layer in getattr(inner, "layers", None) or []:
        for owner, names, attr in ((getattr(layer, "self_attn", None), QKV, "_specfill_qkv"),
                                   (getattr(layer, "mlp", None), GATE_UP, "_specfill_gate_up")):
            parts = [getattr(owner, n, None) for n in names]
            if owner is None or any(p is None for p in parts) or hasattr(owner, attr):
                continue
            fused = fuse(parts, pack_bf16)
            if fused is not None:
                setattr(owner, attr, fused)
                made += 1
    return made


def lean_linears(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The linear layers a lean step calls, by name: the fused q/k/v and gate/up where
    `fuse_projections` made them (their parts then never run there), every other
    projection, and the output layer. Empty for a model without decoder layers."""
    inner = getattr(model, "model", None)
    found: list[tuple[str, nn.Module]] = []
    for i, layer in enumerate(getattr(inner, "layers", None) or []):
        for owner_name, names, attr in (("self_attn", QKV + ("o_proj",), "_specfill_qkv"),
                                        ("mlp", GATE_UP + ("down_proj",), "_specfill_gate_up")):
            owner = getattr(layer, owner_name, None)
            if owner is None:
                continue
            fused = getattr(owner, attr, None)
            if fused is not None:
                found.append((f"model.layers.{i}.{owner_name}.{attr}", fused.module))
                names = names[len(fused.widths):]
            found.extend((f"model.layers.{i}.{owner_name}.{n}", getattr(owner, n))
                         for n in names if getattr(owner, n, None) is not None)
    head = model.get_output_embeddings() if found and hasattr(model, "get_output_embeddings") else None
    if head is not None:
        found.append(("lm_head", head))
    return found
