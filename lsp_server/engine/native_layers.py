"""A decoder layer in one call of specfill's native library (sf_layer_step), for decode
steps and verifies of models whose matrices are all native (GGUF blocks).

Why one call: in torch, the norms, the rotary embedding, the KV writes, the attention and
SiLU of a step were ~40 small ops a layer on torch's single thread (in a one-off profile
on an AMD EPYC, 19 of the 58 ms of a 1.5B target step). Done as separate library calls
from Python they still cost ~130 us a layer between the calls (a probe on an Intel Xeon:
~3 ms of a 23 ms 0.5B draft step). The library's layer step computes each row by the same
instructions whatever the row count, so a verify still equals the single steps bit for bit
(tests/kernels/test_native_layer_ops.py, tests/unit/test_kernels_gguf.py).

Prompts come here too, in feeds of up to lean_step.NATIVE_MAX_ROWS rows whose products take
the kernels' wide path (lean_step.WIDE_ROWS): with torch on one thread beside the kernels'
pool, its layers (SDPA included) prefilled 1,000 tokens in 9.1 s against 5.5 s here. Prompts
and steps compute the same model within float rounding; the exactness that speculation
needs is between steps and verifies, which both stay on the row-independent kernels.
"""

from __future__ import annotations

import torch

from ..kernels import native
from .types import Aborted
from ..kernels.gguf import GGUFEmbedding, GGUFLinear

FIT = "_specfill_native_layers"


def fit(model: torch.nn.Module) -> bool:
    """Whether this model's steps run here: every decoder matrix native, SiLU MLPs, and the
    shapes the library takes (widths and head size multiples of 16). Decided once."""
    known = getattr(model, FIT, None)
    if known is None:
        config = model.config
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        layers = model.model.layers
        known = (native.available() and config.hidden_act == "silu" and config.hidden_size % 16 == 0
                 and dim % 16 == 0 and dim <= 512
                 and isinstance(model.model.embed_tokens, GGUFEmbedding)  # fp32 rows in
                 and all(isinstance(getattr(layer.self_attn, name, None), GGUFLinear) for layer in layers
                         for name in ("q_proj", "k_proj", "v_proj", "o_proj"))
                 and all(isinstance(getattr(layer.mlp, name, None), GGUFLinear) for layer in layers
                         for name in ("gate_proj", "up_proj", "down_proj"))
                 and all(norm.weight.dtype == torch.float32 for layer in layers
                         for norm in (layer.input_layernorm, layer.post_attention_layernorm))
                 and all(layer.input_layernorm.variance_epsilon == layer.post_attention_layernorm.variance_epsilon
                         for layer in layers))
        setattr(model, FIT, known)
    return known


def norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm on rows x [T, H] (fp32, contiguous)."""
    x = x.contiguous()
    return native.rmsnorm(x, module.weight, module.variance_epsilon, torch.empty_like(x))


PLAN = "_specfill_native_layer"


def _group(owner: torch.nn.Module, fused_name: str, names: tuple[str, ...]) -> tuple[list, torch.Tensor | None]:
    """A group's matrices (its fused one where its parts fused: kernels.fuse) and its bias,
    the parts' biases side by side (a missing one as zeros), or None where none has one."""
    fused = getattr(owner, fused_name, None)
    parts = [fused.module] if fused is not None else [getattr(owner, n) for n in names]
    biases = [p.bias for p in parts]
    if all(b is None for b in biases):
        return [p._weight for p in parts], None
    bias = torch.cat([torch.zeros(p.out_features) if b is None else b.float() for p, b in zip(parts, biases)])
    return [p._weight for p in parts], bias.contiguous()


def _plan(layer: torch.nn.Module, config) -> native.Layer:
    """The layer as the library's one-call step, made once and kept on the layer."""
    plan = getattr(layer, PLAN, None)
    if plan is None:
        attn, mlp = layer.self_attn, layer.mlp
        qkv, qkv_bias = _group(attn, "_specfill_qkv", ("q_proj", "k_proj", "v_proj"))
        gate_up, gate_up_bias = _group(mlp, "_specfill_gate_up", ("gate_proj", "up_proj"))
        bias = [None if m.bias is None else m.bias.float().contiguous() for m in (attn.o_proj, mlp.down_proj)]
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        plan = native.Layer(qkv, attn.o_proj._weight, gate_up, mlp.down_proj._weight,
                            (qkv_bias, bias[0], gate_up_bias, bias[1]),
                            (layer.input_layernorm.weight, layer.post_attention_layernorm.weight),
                            layer.input_layernorm.variance_epsilon, config.num_attention_heads,
                            config.num_key_value_heads, dim, attn.scaling)
        setattr(layer, PLAN, plan)
    return plan


def layer(layer: torch.nn.Module, x: torch.Tensor, kv, i: int, past: int, cos: torch.Tensor,
          sin: torch.Tensor, config) -> torch.Tensor:
    """x [T, H] (contiguous fp32, updated in place) after decoder layer `layer` (index i) at
    positions past..past+T-1; writes the layer's keys and values into kv (lean_step.StaticKV)."""
    if kv.keys.dtype != torch.float32 or x.dtype != torch.float32 or not x.is_contiguous():
        shape = "" if x.is_contiguous() else " (not contiguous)"
        raise ValueError(f"the native layer step takes contiguous fp32 rows and an fp32 cache, not "
                         f"{x.dtype} rows{shape} and a {kv.keys.dtype} cache")
    try:
        return _plan(layer, config).step(x, cos, sin, kv.keys, kv.values, i, past)
    except native.Stopped:  # the worker stopped a job mid-layer (its abort): as between layers
        raise Aborted() from None
