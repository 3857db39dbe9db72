"""bf16 layers packed for oneDNN compute what F.linear computes, bit for bit; calls of 1-3
rows run as padded 4-row calls (faster here), and then compute what F.linear computes on the
padded rows."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lsp_server.kernels import packed as packed_module
from lsp_server.kernels.fuse import fuse, fuse_projections
from lsp_server.kernels.packed import ATTR, PackedLinear, linear, pack, pack_linears, packed_form
from lsp_server.kernels.quantize import Int4Linear
from tests.tiny_models import assert_same_logits_feed_after_feed, qwen2_for_fusing

# The packed path needs oneDNN's bf16 kernels (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): on an
# AVX2-only CPU nothing is packed, which the tests that need no packing still check.
needs_packing = pytest.mark.skipif(packed_module.unavailable_reason() is not None,
                                   reason=str(packed_module.unavailable_reason()))


@pytest.fixture
def unpadded(monkeypatch):
    """Calls on exactly the rows given: the kernel's own bits."""
    monkeypatch.setattr(packed_module, "PAD_TO", {})


def bf16_linear(n: int, k: int, bias: bool, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.05)
    return layer.to(torch.bfloat16)


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
def test_packed_output_is_f_linear_bit_for_bit(bias, unpadded):
    layer = bf16_linear(192, 128, bias)
    packed = PackedLinear(layer.weight, layer.bias)
    x = torch.randn(2, 40, 128).bfloat16()
    with torch.inference_mode():
        for rows in (1, 2, 3, 5, 9, 40):
            assert torch.equal(packed(x[0, :rows]), F.linear(x[0, :rows], layer.weight, layer.bias))
        assert torch.equal(packed(x), F.linear(x, layer.weight, layer.bias))  # leading dims kept
        assert torch.equal(linear(layer, x[0]), layer(x[0]))  # no packed form yet: the layer


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
def test_calls_of_1_to_3_rows_run_as_padded_4_row_calls(bias):
    assert packed_module.PAD_TO == {1: 4, 2: 4, 3: 4}
    layer = bf16_linear(192, 128, bias)
    packed = PackedLinear(layer.weight, layer.bias)
    x = torch.randn(40, 128).bfloat16()
    with torch.inference_mode():
        for rows in (1, 2, 3):
            padded = torch.cat([x[:rows], x.new_zeros(4 - rows, 128)])
            got = packed(x[:rows])
            assert got.shape == (rows, 192)
            assert torch.equal(got, F.linear(padded, layer.weight, layer.bias)[:rows])
            assert torch.equal(got, packed.raw(padded)[:rows])
        for rows in (4, 5, 40):  # unpadded: F.linear's bits
            assert torch.equal(packed(x[:rows]), F.linear(x[:rows], layer.weight, layer.bias))


@needs_packing
def test_pack_linears_packs_bf16_linears_only_and_leaves_state_dicts_alone():
    model = qwen2_for_fusing(1, torch.bfloat16)
    keys = set(model.state_dict())
    plain = [m for m in model.modules() if type(m) is nn.Linear]
    assert pack_linears(model) == len(plain) == 2 * 7 + 1  # 7 projections per layer, the head
    assert pack_linears(model) == len(plain)  # idempotent
    assert set(model.state_dict()) == keys and all(packed_form(m) is not None for m in plain)
    fp32 = qwen2_for_fusing(1, torch.bfloat16).float()
    assert pack_linears(fp32) == 0  # other dtypes keep F.linear
    int4 = nn.Sequential(Int4Linear.from_linear(bf16_linear(64, 128, False).float(), 32))
    assert pack_linears(int4) == 0


def test_a_weight_packing_would_change_is_left_unpacked(monkeypatch):
    layer = bf16_linear(64, 128, False)
    monkeypatch.setattr("lsp_server.kernels.packed.same_numbers", lambda *a: False)
    assert pack(layer.weight, None) is None


@needs_packing
@pytest.mark.parametrize("widths,bias", [((128, 64, 64), True), ((256, 256), False)], ids=["qkv", "gate-up"])
def test_bf16_layers_fuse_into_one_packed_copy(widths, bias, unpadded):
    parts = [bf16_linear(n, 128, bias, seed=i) for i, n in enumerate(widths)]
    x = torch.randn(40, 128).bfloat16()
    with torch.inference_mode():
        fused = fuse(parts, pack_bf16=True)
        assert fused is not None and fused.widths == widths and fused.max_rows == float("inf")
        assert all(hasattr(p, ATTR) and packed_form(p) is None for p in parts)  # no copies of their own
        for rows in (1, 2, 5, 40):
            for got, part in zip(fused(x[:rows]), parts):
                assert torch.equal(got, part(x[:rows]))


def test_bf16_layers_fuse_only_when_asked_to_pack():
    parts = [bf16_linear(64, 128, False, seed=i) for i in range(2)]
    assert fuse(parts) is None
    assert fuse([parts[0], parts[1].float()], pack_bf16=True) is None  # not all bf16


@needs_packing
def test_lean_steps_on_packed_layers_give_the_same_logits_as_without(unpadded):
    plain, packed = qwen2_for_fusing(5, torch.bfloat16), qwen2_for_fusing(5, torch.bfloat16)
    assert fuse_projections(packed, pack_bf16=True) == 4  # q/k/v and gate/up in each of 2 layers
    assert pack_linears(packed) == 2 * 2 + 1  # o and down per layer, the head: the fused parts skipped
    assert pack_linears(packed) == 2 * 2 + 1  # idempotent
    # transformers' forward still runs the layers' own weights: the same numbers too
    assert_same_logits_feed_after_feed(plain, packed)



def test_where_onednn_cannot_pack_bf16_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(packed_module, "unavailable_reason", lambda: "this CPU lacks AVX-512")
    model = qwen2_for_fusing(1, torch.bfloat16)
    assert pack_linears(model) == 0
    assert all(packed_form(m) is None for m in model.modules())
