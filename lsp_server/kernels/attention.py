"""Attention for decode steps and verifies on a CPU: grouped-query heads packed, not copied.

Qwen2.5-Coder shares each key/value head among 6 (1.5B) or 7 (0.5B) query heads. For a
decode step transformers' `sdpa` path on a CPU calls SDPA with `enable_gqa=True`, and for a
verify (a few rows and a causal mask) it first copies the key/value heads `repeat_kv`-style.
Both are slow on torch 2.13's CPU kernels and grow with the context (2 threads, one layer
of the 1.5B target, 1,500 cached tokens: 1.9 ms for one row, 3.3 ms for 9 rows). Folding a
head group's query rows into one head instead, `[B, H, q, D] -> [B, KV, g*q, D]`, makes
it one plain SDPA call per key/value head with no copies (0.15 ms and 0.78 ms), with the
same numbers.

Prefills (more than `PACKED_MAX_ROWS` rows) and anything unusual go to transformers' own
`sdpa` function unchanged.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

NAME = "specfill_packed_sdpa"
# Verifies have up to ~13 rows; prefills are long and already fast in the standard path.
PACKED_MAX_ROWS = 16


def packed_gqa_attention(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
    is_causal: bool | None = None, **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, H, q, D], key/value
    [B, KV, L, D], a boolean or additive mask [B, 1, q, L] or None; returns [B, q, H, D]."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, rows, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    standard = (
        groups == 1 or rows > PACKED_MAX_ROWS or dropout
        or heads != groups * kv_heads
        # Several rows and no mask: a prefill into an empty cache, causal by position.
        or (attention_mask is None and rows > 1)
        or (attention_mask is not None and attention_mask.shape[1] != 1)
        or any(kwargs.get(name) is not None for name in ("position_bias", "softcap", "sinks", "s_aux"))
    )
    if standard:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    # Rows of head group j are ordered (query head in the group, position), so the mask of
    # the q positions repeats once per query head of the group.
    packed = query.reshape(batch, kv_heads, groups * rows, dim)
    mask = attention_mask.repeat(1, 1, groups, 1) if attention_mask is not None else None
    out = F.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
    return out.view(batch, heads, rows, dim).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, packed_gqa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the same masks as `sdpa`


def use_packed_gqa(model: torch.nn.Module) -> bool:
    """Switch a model that uses transformers' `sdpa` attention to the packed form; other
    choices (eager, flash, ...) are left alone. Returns whether it switched."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", NAME):
        return False
    _register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, KeyError, AttributeError):  # a model that can't switch keeps `sdpa`
        return False
    return True
