"""Fused q/k/v and gate/up projections compute what the separate layers compute, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lsp_server.kernels.fuse import fuse, fuse_projections
from lsp_server.kernels.quantize import Int4Linear, keep_dense_for_prefill, linear_weights, quantize_model
from lsp_server.kernels.w8a8 import W8A8Linear, w8a8_available
from tests.tiny_models import assert_same_logits_feed_after_feed, qwen2_for_fusing

needs_zentorch = pytest.mark.skipif(not w8a8_available(), reason="zentorch's int8 kernel does not run here")


def linears(widths: tuple[int, ...], bias: bool, seed: int = 0, in_features: int = 128) -> list[nn.Linear]:
    torch.manual_seed(seed)
    layers = [nn.Linear(in_features, n, bias=bias) for n in widths]
    with torch.no_grad():
        for layer in layers:
            layer.weight.normal_(0.0, 0.05)
    return layers


@pytest.mark.parametrize("kind", ["int4", pytest.param("w8a8", marks=needs_zentorch)])
@pytest.mark.parametrize("widths,bias", [((128, 64, 64), True), ((256, 256), False)], ids=["qkv", "gate-up"])
def test_fused_output_is_the_separate_outputs_side_by_side(kind, widths, bias):
    originals = linears(widths, bias)
    parts = [Int4Linear.from_linear(layer, 32) if kind == "int4" else W8A8Linear.from_linear(layer)
             for layer in originals]
    x = torch.randn(5, 128).bfloat16()
    with torch.inference_mode():
        before = [part(x) for part in parts]
        fused = fuse(parts)
        assert fused is not None and fused.widths == widths
        for rows in (1, 2, 5):
            got = fused(x[:rows])
            for out, expected in zip(got, before):
                assert torch.equal(out, expected[:rows])
        # The int4 layers now read views of the fused weight: still the same numbers.
        after = [part(x) for part in parts]
    assert all(torch.equal(a, b) for a, b in zip(after, before))
    if kind == "int4":
        storage = fused.module.weight.untyped_storage().data_ptr()
        assert all(part.weight.untyped_storage().data_ptr() == storage for part in parts)


def test_layers_that_differ_are_not_fused():
    a, b = linears((32, 32), bias=False)
    assert fuse([Int4Linear.from_linear(a, 32), Int4Linear.from_linear(b, 64)]) is None  # group sizes
    assert fuse([a, b]) is None  # not quantized
    c = linears((32,), bias=True, seed=1)[0]
    assert fuse([Int4Linear.from_linear(a, 32), Int4Linear.from_linear(c, 32)]) is None  # bias or not
    e = linears((32,), bias=False, in_features=64)[0]
    assert fuse([Int4Linear.from_linear(a, 32), Int4Linear.from_linear(e, 32)]) is None  # inputs


def test_int4_layers_whose_packed_rows_do_not_concatenate_stay_apart():
    parts = [Int4Linear.from_linear(layer, 32) for layer in linears((16, 16, 16), bias=False)]
    weights = [part.weight for part in parts]
    x = torch.randn(3, 128).bfloat16()
    with torch.inference_mode():
        before = [part(x) for part in parts]
        fused = fuse(parts)  # 16-row packs do not concatenate with this CPU's layout
        if fused is not None:  # (a CPU whose layout they fit: then the numbers must agree)
            assert all(torch.equal(a, b) for a, b in zip(fused(x), before))
        else:
            assert all(part.weight is w for part, w in zip(parts, weights))
        assert all(torch.equal(part(x), b) for part, b in zip(parts, before))


def test_fused_int4_layers_leave_prefills_to_the_dense_copies():
    layers = linears((128, 64, 64), bias=True)
    parts = [Int4Linear.from_linear(layer, 32) for layer in layers]
    for part, layer in zip(parts, layers):
        part.dense, part.dense_min_rows = layer.weight.detach().bfloat16(), 32
    assert fuse(parts).max_rows == 31


@pytest.mark.parametrize("mode", ["int4", pytest.param("w8a8", marks=needs_zentorch)])
def test_lean_steps_with_fused_projections_give_the_same_logits(mode):
    plain, fused = qwen2_for_fusing(5), qwen2_for_fusing(5)
    for model in (plain, fused):
        dense = linear_weights(model)
        quantize_model(model, mode, 32)
        keep_dense_for_prefill(model, dense)
    keys = set(fused.state_dict())
    assert fuse_projections(fused) == 4  # q/k/v and gate/up in each of 2 layers
    assert fuse_projections(fused) == 0  # idempotent
    assert set(fused.state_dict()) == keys  # not submodules: state dicts and weight counts unchanged
    assert_same_logits_feed_after_feed(plain, fused)
