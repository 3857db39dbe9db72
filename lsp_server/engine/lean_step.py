"""A lean forward pass for Qwen2- and Llama-shaped models: the same modules, less glue.

On a 2-core CPU a draft step of the 0.5B model spent ~7 of its ~25 ms outside the
matrix products: transformers builds a mask and position embeddings per call, dispatches every
layer through keyword-heavy wrappers and output hooks, and `DynamicCache` concatenates
each layer's keys and values, copying the whole cache on every token. This pass calls the
model's own submodules (projections, norms, MLPs, embeddings, head: GGUF ones
included) in the same order with the same operations, and keeps keys and values in
preallocated tensors (`StaticKV`), so a step writes k+1 rows in place and rolling back a
rejected draft is setting a length.

Only plain causal decoders with position-only rotary embeddings qualify (`supports`);
anything else keeps the transformers forward. Numbers match transformers' forward (tests
compare logits on tiny models in float64 to 1e-10; on the real pair in bf16 they were
bit-identical in a one-off check), so a lean target still defines the same model. On the
native kernels each decoder layer of a step or a verify is one call (`native_layers`).
"""

from __future__ import annotations

import sys
from typing import Callable

import torch
from torch.nn import functional as F

from ..kernels.attention import packed_gqa_attention
from ..kernels.gguf import block_weights
from ..kernels.lm_head import head_pieces
from . import native_layers

_DECODERS = {"qwen2": "Qwen2DecoderLayer", "llama": "LlamaDecoderLayer"}
# Rope tables are computed ahead for this many positions at a time.
_ROPE_CHUNK = 4096
# The cache grows by this factor (and in whole multiples of _KV_BLOCK tokens) when full.
_KV_GROWTH, _KV_BLOCK = 1.5, 256


def supports(model: torch.nn.Module) -> bool:
    """Whether `lean_forward` computes what `model.forward` computes for this model."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    layer_name = _DECODERS.get(getattr(config, "model_type", None))
    if config is None or inner is None or layer_name is None:
        return False
    layers = getattr(inner, "layers", None)
    rotary = getattr(inner, "rotary_emb", None)
    if not layers or rotary is None or getattr(rotary, "rope_type", None) != "default":
        return False
    if any(type(layer).__name__ != layer_name for layer in layers):
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if getattr(config, "use_sliding_window", False) or set(layer_types) != {"full_attention"}:
        return False
    return model.get_output_embeddings() is not None


class StaticKV:
    """Keys and values of every layer in preallocated tensors [layers, KV, capacity, D].

    `length` counts the positions that hold valid entries; writing past it is how a step
    appends, lowering it is how a rollback drops entries."""

    def __init__(self, model: torch.nn.Module):
        config = model.config
        self.layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        param = next(model.parameters())
        self.dtype = param.dtype if param.is_floating_point() else torch.bfloat16
        self.device = param.device
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    @property
    def capacity(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def reserve(self, positions: int) -> None:
        if positions <= self.capacity:
            return
        grown = max(positions, int(self.capacity * _KV_GROWTH))
        grown = -(-grown // _KV_BLOCK) * _KV_BLOCK
        shape = (self.layers, self.kv_heads, grown, self.head_dim)
        keys = torch.empty(shape, dtype=self.dtype, device=self.device)
        values = torch.empty(shape, dtype=self.dtype, device=self.device)
        if self.keys is not None and self.length:
            keys[:, :, :self.length] = self.keys[:, :, :self.length]
            values[:, :, :self.length] = self.values[:, :, :self.length]
        self.keys, self.values = keys, values

    def release(self) -> None:
        self.keys = self.values = None
        self.length = 0


def _rope_table(model: torch.nn.Module, positions: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [P, D] for positions 0..P-1 from the model's own rotary module (the same
    arithmetic per position as a forward computes), kept on the model and grown in chunks."""
    table = getattr(model, "_specfill_rope", None)
    if table is None or table[0].shape[0] < positions or table[0].dtype != dtype:
        size = -(-positions // _ROPE_CHUNK) * _ROPE_CHUNK
        device = next(model.parameters()).device
        ids = torch.arange(size, device=device)[None]  # [1, P]
        probe = torch.empty(0, dtype=dtype, device=device)
        cos, sin = model.model.rotary_emb(probe, ids)
        table = (cos[0], sin[0])
        model._specfill_rope = table
    return table


def _causal_mask(rows: int, past: int, device: torch.device) -> torch.Tensor | None:
    """[1, 1, T, past+T] boolean: row j sees positions 0..past+j. None where no mask is
    needed: one row sees everything cached, and a feed into an empty cache is causal by
    position (the attention function then asks SDPA for is_causal, as transformers does)."""
    if rows == 1 or past == 0:
        return None
    return torch.ones(rows, past + rows, dtype=torch.bool, device=device).tril(past)[None, None]


# Set on a model whose every layer a lean step calls computes each row on its own (the
# native kernels): then verifies run attention one query row at a time, as the single steps at
# those positions do, so a verify of k+1 rows computes exactly what k+1 steps compute.
ROWS_INDEPENDENT = "_specfill_rows_independent"
# Verifies; longer feeds are prompts, which plain and speculative decoding read alike.
ROW_BY_ROW_MAX_ROWS = 16
# Products of this many rows and more take the kernels' wide path (native.set_wide_rows), on
# AVX-512 (AVX2: WIDE_ROWS_AVX2 below):
# 32 weight rows at a time quantized again to int8 and shared by every row, ~1.4x the
# repacked kernels' rate on Q4_K and ~2x on Q6_K at 256-512 rows, slower below ~64 (the
# tile costs about what 40 rows of products do). The target's prompt of 100 / 200 tokens
# in one feed: 0.58 / 0.92 s from 64 rows on, 0.69 / 0.95 s from 128, 0.68 / 1.29 s
# without (AMD EPYC Zen 4, 2 threads, interleaved, one run). Each row still gets the same
# numbers whatever the other rows, but not those of the repacked kernels, so verifies (at
# most ROW_BY_ROW_MAX_ROWS rows, compared with single steps) must stay below it.
WIDE_ROWS = 64
# The AVX2 variant's wide path (int16 products: AVX2 has no u8 x s8 dot product into int32)
# only draws level with its repacked kernels, whose 4-bit weights sum in int16, at ~192 rows:
# `bench kernels`, all the matrices of both models, 2 threads, GMAC/s repacked / wide at 64
# rows 126 / 80, 128 115 / 108, 192 127 / 126, 256 131 / 130, 512 123 / 128 (AMD EPYC Zen 4,
# SPECFILL_KERNEL=avx2). Q6_K gains (~1.2x from ~96 rows), Q4_K not before ~256.
WIDE_ROWS_AVX2 = 256


def wide_rows(variant: str) -> int:
    """The rows from which the products take the wide path on kernel variant `variant`."""
    return WIDE_ROWS_AVX2 if variant == "avx2" else WIDE_ROWS


# Q4_0 products (the draft's layers, requantized at load) take their own wide path from this
# many rows (native.set_wide_rows_q4_0), on AVX-512 and AVX2 alike: its tiles keep Q4_0's
# nibbles and scales as they are, so it gives the repacked kernels' bits and its threshold is
# speed alone. The draft's matrices, 2 threads, GMAC/s repacked / wide (AMD EPYC Zen 4):
# AVX-512 at 16 rows 143 / 160 but `down` (K = 4864) 118 / 99, at 32 155 / 223 and down
# 144 / 145 (each kind alone, interleaved, median of 5); `bench kernels --model draft`: AVX-512
# at 32 / 64 / 512 rows 143 / 214, 148 / 249, 162 / 277; AVX2 at 16 / 32 / 64 / 512 72 / 112,
# 74 / 138, 82 / 148, 108 / 161. From 32 rows no matrix is slower on either.
WIDE_ROWS_Q4_0 = 32


# Prompts go through the native one-call layers in feeds of up to this many rows: a
# 1,000-token prefill of the 1.5B target took 5.11 s here against 7.71 s in 16-row feeds
# (`specfill bench prefill`, AMD EPYC Zen 4, 2 threads, 2026-12-07 14:41), 256-row feeds
# 5.24 s against 4.84 s for 512 in an interleaved probe (a tile of weights is made once a
# feed: more rows share it), and 9.1 s through torch's layers in 512-row feeds. A stop
# request still lands within a 32-row tile of a product (native.request_stop); the layer's
# scratch is ~70 MB at 512 rows.
NATIVE_MAX_ROWS = 512
assert min(WIDE_ROWS, WIDE_ROWS_AVX2) > ROW_BY_ROW_MAX_ROWS


def one_call_rows(model: torch.nn.Module) -> int:
    """The most rows a feed takes through the native one-call layers (`native_layers`);
    0 where this model's layers do not run there."""
    return NATIVE_MAX_ROWS if native_layers.fit(model) else 0


def _logits(model: torch.nn.Module, head: Callable[[torch.Tensor], torch.Tensor] | None,
            x: torch.Tensor, between_layers: Callable[[], None] | None) -> torch.Tensor:
    """The head's logits [T, V] for final hidden states x [T, H]. The model's own GGUF head
    runs in pieces of about one decoder layer's bytes with an abort check before each
    (lm_head.head_pieces: the target's head costs ~6 layers), so background work stops
    within about a layer wherever the abort finds it."""
    if between_layers is not None:
        between_layers()
    if head is not None:
        return head(x)
    own = model.get_output_embeddings()
    pieces = head_pieces(own, _layer_bytes(model)) if between_layers is not None else None
    if pieces is None:
        return own(x)
    logits = x.new_empty(x.shape[0], own.out_features)
    for i, (start, piece) in enumerate(pieces):
        if i:
            between_layers()
        logits[:, start:start + piece.out_features] = piece(x)
    return logits


def _layer_bytes(model: torch.nn.Module) -> int:
    """Bytes of weight blocks the first decoder layer reads (0: not a GGUF model)."""
    cached = getattr(model, "_specfill_layer_bytes", None)
    if cached is None:
        cached = block_weights(model.model.layers[0])[1]
        model._specfill_layer_bytes = cached
    return cached


def rows_independent(model: torch.nn.Module) -> bool:
    return bool(getattr(model, ROWS_INDEPENDENT, False))


def _attention(attn: torch.nn.Module, q: torch.Tensor, kv: StaticKV, layer: int, past: int,
               mask: torch.Tensor | None, row_by_row: bool) -> torch.Tensor:
    """Attention output [T, H, D] for queries q [H, T, D] at positions past..past+T-1.

    The same attention function as the model's own forward on a CPU (packed query rows for
    steps and verifies, transformers' sdpa for longer feeds). SDPA's kernels block their
    work by the number of query rows, so a row's numbers depend on the rows beside it; with
    `row_by_row` each row is its own call on exactly the keys a step there would see."""
    keys, values = kv.keys[layer, None], kv.values[layer, None]  # [1, KV, capacity, D]
    if not row_by_row:
        out, _ = packed_gqa_attention(attn, q[None], keys[:, :, :past + q.shape[1]],
                                      values[:, :, :past + q.shape[1]], mask, scaling=attn.scaling)
        return out[0]
    heads, rows, dim = q.shape
    kv_heads = keys.shape[1]
    if heads == kv_heads:  # no shared heads: the standard path, row by row
        return torch.cat([packed_gqa_attention(attn, q[None, :, j:j + 1], keys[:, :, :past + j + 1],
                                               values[:, :, :past + j + 1], None, scaling=attn.scaling)[0][0]
                          for j in range(rows)])
    # What packed_gqa_attention does for a one-row step (one SDPA call per key/value head
    # group, query heads folded in), called directly: T calls per layer, so its Python
    # checks would cost more than the attention of a short verify.
    packed = q.reshape(kv_heads, heads // kv_heads, rows, dim).transpose(1, 2)  # [KV, T, g, D]
    out = [F.scaled_dot_product_attention(packed[None, :, j].contiguous(), keys[:, :, :past + j + 1],
                                          values[:, :, :past + j + 1], scale=attn.scaling)
           for j in range(rows)]  # each [1, KV, g, D]
    return torch.stack(out).reshape(rows, heads, dim)


@torch.inference_mode()
def lean_forward(model: torch.nn.Module, kv: StaticKV, input_ids: torch.Tensor, all_logits: bool,
                 between_layers: Callable[[], None] | None = None,
                 head: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Feed input_ids [T] after the kv.length cached positions; returns logits [T, V] (or
    [1, V] for the last position) from `head` (default: the model's output layer).
    kv.length advances only when the whole pass finished, so an exception between layers
    leaves the cache as it was."""
    inner = model.model
    config = model.config
    rows, past = input_ids.shape[0], kv.length
    kv.reserve(past + rows)
    x = inner.embed_tokens(input_ids)  # [T, H]
    cos, sin = _rope_table(model, past + rows, x.dtype)
    cos, sin = cos[past:past + rows], sin[past:past + rows]  # [T, D]
    if rows <= one_call_rows(model):
        for i, layer in enumerate(inner.layers):
            if between_layers is not None:
                between_layers()
            x = native_layers.layer(layer, x, kv, i, past, cos, sin, config)
        x = native_layers.norm(inner.norm, x if all_logits else x[-1:])
        logits = _logits(model, head, x, between_layers)  # [T, V]
        kv.length = past + rows
        return logits
    heads, kv_heads, dim = config.num_attention_heads, kv.kv_heads, kv.head_dim
    mask = _causal_mask(rows, past, x.device)
    one_row_at_a_time = rows_independent(model) and 1 < rows <= ROW_BY_ROW_MAX_ROWS
    # transformers' own rotary arithmetic, from the module that defines the layers
    rope = sys.modules[type(inner.layers[0].self_attn).__module__].apply_rotary_pos_emb
    for i, layer in enumerate(inner.layers):
        if between_layers is not None:
            between_layers()
        attn, mlp = layer.self_attn, layer.mlp
        h = layer.input_layernorm(x)
        qkv = getattr(attn, "_specfill_qkv", None)  # kernels.fuse: one call, same numbers
        q, k, v = qkv(h) if qkv else (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h))
        q = q.view(rows, heads, dim).transpose(0, 1)  # [H, T, D]
        k = k.view(rows, kv_heads, dim).transpose(0, 1)  # [KV, T, D]
        v = v.view(rows, kv_heads, dim).transpose(0, 1)
        q, k = rope(q, k, cos, sin, unsqueeze_dim=0)
        kv.keys[i, :, past:past + rows] = k
        kv.values[i, :, past:past + rows] = v
        out = _attention(attn, q, kv, i, past, mask, one_row_at_a_time)
        x = x + attn.o_proj(out.reshape(rows, -1))
        h = layer.post_attention_layernorm(x)
        gate_up = getattr(mlp, "_specfill_gate_up", None)
        # the MLP's own arithmetic: down(act(gate(h)) * up(h))
        gate, up = gate_up(h) if gate_up else (mlp.gate_proj(h), mlp.up_proj(h))
        x = x + mlp.down_proj(mlp.act_fn(gate) * up)
    x = inner.norm(x if all_logits else x[-1:])
    logits = _logits(model, head, x, between_layers)  # [T, V]
    kv.length = past + rows
    return logits
