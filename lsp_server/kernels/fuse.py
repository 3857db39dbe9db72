"""One native product where a decoder layer runs several on the same input.

Attention's q, k and v projections read the same normalised input, and so do the MLP's
gate and up projections. Each product quantizes its input rows and wakes the kernels'
workers, so one product on the weights stacked by output rows saves two of them a layer.
Every output row is its own dot product over the same input, so the fused product computes
the same numbers bit for bit (tests/unit/test_kernels_fuse.py). The layers keep their own
modules for transformers' forward (prefills); lean steps and the native layer step use the
fused ones.

GGUF layers fuse where their block types agree (`gguf.fuse_rows`): gate and up lie back to
back in the file, so theirs is a view; q/k/v are stacked in a copy where they are not.
Dense (bf16 / fp32) layers do not fuse: stacking them would copy the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .gguf import GGUFLinear, fuse_rows

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class Fused:
    """A fused module and the output widths of the layers it stands for."""

    module: Callable[[torch.Tensor], torch.Tensor]
    widths: tuple[int, ...]

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.module(x).split(self.widths, dim=-1)


def fuse(parts: list[nn.Module]) -> Fused | None:
    """The fused form of GGUF layers that read one input, or None where they can't fuse
    (other kinds of layers, block types or biases that differ)."""
    if {type(p) for p in parts} != {GGUFLinear}:
        return None
    module = fuse_rows(parts)
    return Fused(module, tuple(p.out_features for p in parts)) if module is not None else None


def fuse_projections(model: nn.Module) -> int:
    """Give each decoder layer `self_attn._specfill_qkv` and `mlp._specfill_gate_up` where
    its projections fuse (plain attributes, not submodules: state dicts and weight counts
    stay as they were). Returns how many fusions were made."""
    inner = getattr(model, "model", None)
    made = 0
    for layer in getattr(inner, "layers", None) or []:
        for owner, names, attr in ((getattr(layer, "self_attn", None), QKV, "_specfill_qkv"),
                                   (getattr(layer, "mlp", None), GATE_UP, "_specfill_gate_up")):
            parts = [getattr(owner, n, None) for n in names]
            if owner is None or any(p is None for p in parts) or hasattr(owner, attr):
                continue
            fused = fuse(parts)
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
