"""A decoder layer's steps around its products in specfill's native library, for decode
steps and verifies of models whose matrices are all native (GGUF blocks).

In torch, the norms, the rotary embedding, the KV writes, the attention and SiLU of a
step are ~40 small ops a layer on torch's single thread (the pool's threads run the
products): in a one-off profile (AMD EPYC, avx512_vnni, 2 cores) they took 19 of the
58 ms of a 1.5B target step, and 12 of 29 ms of a 0.5B draft step. The library does
them in four calls a layer (`kernels.native`: sf_rmsnorm, sf_attention, sf_silu_mul),
each row by the same instructions whatever the row count, so a verify still equals the
single steps bit for bit (tests/kernels/test_native_layer_ops.py, tests/unit/test_kernels_gguf.py).

Long feeds (prompts) keep the torch path of `lean_step`: there attention is most of the
work, and SDPA's blocked kernels do it faster. Both paths compute the same model within
float rounding; the exactness that speculation needs is between steps and verifies, which
both run here.
"""

from __future__ import annotations

import torch

from ..kernels import native
from ..kernels.gguf import GGUFEmbedding, GGUFLinear
from ..kernels.packed import linear

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
                         for norm in (layer.input_layernorm, layer.post_attention_layernorm)))
        setattr(model, FIT, known)
    return known


def norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm on rows x [T, H] (fp32, contiguous)."""
    x = x.contiguous()
    return native.rmsnorm(x, module.weight, module.variance_epsilon, torch.empty_like(x))


def _gate_up(mlp: torch.nn.Module, rows: int, h: torch.Tensor) -> torch.Tensor:
    """[T, 2F] = [gate(h) | up(h)]: one product where the two are fused (a view of the file)."""
    fused = getattr(mlp, "_specfill_gate_up", None)
    if fused is not None and rows <= fused.max_rows:
        return fused.module(h)
    return torch.cat([linear(mlp.gate_proj, h), linear(mlp.up_proj, h)], dim=1)


def layer(layer: torch.nn.Module, x: torch.Tensor, kv, i: int, past: int, cos: torch.Tensor,
          sin: torch.Tensor) -> torch.Tensor:
    """x [T, H] after decoder layer `layer` (index i) at positions past..past+T-1; writes
    the layer's keys and values into kv (lean_step.StaticKV)."""
    attn, mlp = layer.self_attn, layer.mlp
    rows = x.shape[0]
    h = norm(layer.input_layernorm, x)
    qkv = getattr(attn, "_specfill_qkv", None)
    if qkv is not None and rows <= qkv.max_rows:
        q, k, v = qkv(h)  # row views of one [T, (H + 2 KV) D] buffer
    else:  # block types differ (Q4_K_M files keep v in Q6_K in some layers)
        q, k, v = linear(attn.q_proj, h), linear(attn.k_proj, h), linear(attn.v_proj, h)
    out = native.attention(q, k, v, cos, sin, kv.keys[i], kv.values[i], past, attn.scaling,
                           torch.empty(rows, q.shape[1]))
    x = x + linear(attn.o_proj, out)
    h = norm(layer.post_attention_layernorm, x)
    act = native.silu_mul(_gate_up(mlp, rows, h), torch.empty(rows, mlp.down_proj.in_features))
    x += linear(mlp.down_proj, act)
    return x
