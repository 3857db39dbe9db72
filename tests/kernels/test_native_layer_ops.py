"""The float steps of a layer in the native library (rmsnorm, attention, silu_mul): close
to torch's own arithmetic, every variant this CPU runs bit-identical to the scalar one,
and each row's bits independent of the rows beside it."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from lsp_server.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "no native kernels")


@pytest.fixture(params=["scalar", "avx2", "avx512", "neon"])
def variant(request):
    if request.param not in native.variants_supported():
        pytest.skip(f"this CPU cannot run the {request.param} kernels (flags: {' '.join(native.cpu_flags())})")
    before = native.variant()
    native.set_variant(request.param)
    yield request.param
    native.set_variant(before)


def _in_variant(name, fn):
    before = native.variant()
    native.set_variant(name)
    try:
        return fn()
    finally:
        native.set_variant(before)


def test_rmsnorm_is_torchs_within_rounding_and_rows_are_independent(variant):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 1536, generator=g) * 3, torch.randn(1536, generator=g)
    got = native.rmsnorm(x, w, 1e-6, torch.empty_like(x))
    want = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)
    one = native.rmsnorm(x[3:4].clone(), w, 1e-6, torch.empty(1, 1536))
    assert torch.equal(one, got[3:4])
    assert torch.equal(got, _in_variant("scalar", lambda: native.rmsnorm(x, w, 1e-6, torch.empty_like(x))))


def test_silu_mul_is_torchs_within_rounding_including_large_inputs(variant):
    g = torch.Generator().manual_seed(1)
    gate_up = torch.randn(3, 2 * 8960, generator=g) * 4
    gate_up[0, :4] = torch.tensor([-200.0, 200.0, -88.5, 0.0])
    got = native.silu_mul(gate_up, torch.empty(3, 8960))
    gate, up = gate_up.split(8960, dim=1)
    torch.testing.assert_close(got, F.silu(gate) * up, rtol=1e-6, atol=1e-6)
    assert torch.equal(got, _in_variant("scalar", lambda: native.silu_mul(gate_up, torch.empty(3, 8960))))


def _attention_case(rows, past, heads=12, kv_heads=2, dim=128, seed=2):
    g = torch.Generator().manual_seed(seed)
    cap = past + rows + 7
    keys, values = torch.randn(kv_heads, cap, dim, generator=g), torch.randn(kv_heads, cap, dim, generator=g)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g)
    positions = torch.arange(past, past + rows, dtype=torch.float32)
    inv = 1.0 / (1e6 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = torch.cat([positions[:, None] * inv] * 2, dim=1)  # [rows, dim], as Qwen2's rotary makes them
    return keys, values, qkv, angles.cos(), angles.sin()


def _run_attention(keys, values, qkv, cos, sin, past, heads=12, kv_heads=2, dim=128):
    keys, values, qkv = keys.clone(), values.clone(), qkv.clone()
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=1)
    out = native.attention(q, k, v, cos, sin, keys, values, past, dim ** -0.5, torch.empty(qkv.shape[0], heads * dim))
    return out, keys, values


def _rotate(x, cos, sin):  # transformers' apply_rotary_pos_emb on [rows, heads, dim]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


@pytest.mark.parametrize("rows,past", [(1, 0), (1, 37), (5, 300), (13, 64)])
def test_attention_is_sdpa_on_the_rotated_rows_and_fills_the_cache(variant, rows, past):
    heads, kv_heads, dim = 12, 2, 128
    keys, values, qkv, cos, sin = _attention_case(rows, past)
    out, new_keys, new_values = _run_attention(keys, values, qkv, cos, sin, past)
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=1)
    q = _rotate(q.view(rows, heads, dim), cos, sin).transpose(0, 1)  # [H, T, D]
    k = _rotate(k.view(rows, kv_heads, dim), cos, sin).transpose(0, 1)
    want_keys, want_values = keys.clone(), values.clone()
    want_keys[:, past:past + rows], want_values[:, past:past + rows] = k, v.view(rows, kv_heads, dim).transpose(0, 1)
    assert torch.equal(new_keys[:, :past + rows], want_keys[:, :past + rows])  # rotation: torch's own bits
    assert torch.equal(new_values, want_values)
    mask = torch.ones(rows, past + rows, dtype=torch.bool).tril(past)
    want = F.scaled_dot_product_attention(q[None], want_keys[None, :, :past + rows], want_values[None, :, :past + rows],
                                          attn_mask=mask, scale=dim ** -0.5, enable_gqa=True)[0]
    torch.testing.assert_close(out.view(rows, heads, dim), want.transpose(0, 1), rtol=2e-5, atol=2e-6)


def test_attention_rows_match_single_steps_bit_for_bit_in_every_variant(variant):
    rows, past = 9, 120
    keys, values, qkv, cos, sin = _attention_case(rows, past, seed=4)
    together, _, _ = _run_attention(keys, values, qkv, cos, sin, past)
    k_cache, v_cache = keys.clone(), values.clone()
    alone = []
    for j in range(rows):
        q, k, v = qkv[j:j + 1].clone().split([12 * 128, 256, 256], dim=1)
        alone.append(native.attention(q, k, v, cos[j:j + 1], sin[j:j + 1], k_cache, v_cache, past + j, 128 ** -0.5,
                                      torch.empty(1, 12 * 128)))
    assert torch.equal(together, torch.cat(alone))
    scalar, _, _ = _in_variant("scalar", lambda: _run_attention(keys, values, qkv, cos, sin, past))
    assert torch.equal(together, scalar)


def test_bad_shapes_are_refused_not_read_out_of_bounds():
    keys, values, qkv, cos, sin = _attention_case(2, 10)
    q, k, v = qkv.split([12 * 128, 256, 256], dim=1)
    with pytest.raises(RuntimeError, match="bad shape"):  # positions past the cache's capacity
        native.attention(q, k, v, cos, sin, keys[:, :11], values[:, :11], 10, 0.1, torch.empty(2, 12 * 128))
    with pytest.raises(RuntimeError, match="bad shape"):  # a width that is no multiple of 16
        native.rmsnorm(torch.randn(1, 30), torch.randn(30), 1e-6, torch.empty(1, 30))
