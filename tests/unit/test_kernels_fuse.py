"""Fused q/k/v and gate/up projections compute what the separate layers compute, bit for bit."""

from __future__ import annotations

import pytest
import torch

from lsp_server.kernels import native
from lsp_server.kernels.fuse import fuse, fuse_projections
from lsp_server.engine.cache import LeanSlot
from tests.tiny_models import qwen2_for_fusing
from tests.unit.test_kernels_gguf import files, load  # noqa: F401 (files: a fixture)

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.why_unavailable()}")


@pytest.mark.parametrize("names", [("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")], ids=["qkv", "gate-up"])
def test_fused_output_is_the_separate_outputs_side_by_side(files, names):
    model = load(files, "draft")  # every matrix Q8_0: every group fuses
    owner = model.model.layers[1].self_attn if names[0] == "q_proj" else model.model.layers[1].mlp
    parts = [getattr(owner, n) for n in names]
    x = torch.randn(5, 128)
    with torch.inference_mode():
        before = [part(x) for part in parts]
        fused = fuse(parts)
        assert fused is not None and fused.widths == tuple(p.out_features for p in parts)
        for rows in (1, 2, 5):
            for out, expected in zip(fused(x[:rows]), before):
                assert torch.equal(out, expected[:rows])
        # The parts now read row views of the fused kernel weight: still the same numbers.
        assert all(torch.equal(part(x), b) for part, b in zip(parts, before))


@pytest.mark.parametrize("names", [("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")], ids=["qkv", "gate-up"])
def test_parts_fused_before_their_first_use_get_no_copy_of_their_own(files, names):
    model, twin = load(files, "draft"), load(files, "draft")
    owner, twin_owner = ((m.model.layers[1].self_attn if names[0] == "q_proj" else m.model.layers[1].mlp)
                         for m in (model, twin))
    parts = [getattr(owner, n) for n in names]
    assert all(p._form is None for p in parts)  # nothing repacked at load: made on first use
    fused = fuse(parts)
    whole = fused.module._weight.weight
    start, end = whole.data_ptr(), whole.data_ptr() + whole.numel() * whole.element_size()
    for part in parts:  # row views of the one repacked copy
        assert start <= part._weight.weight.data_ptr() < end
    x = torch.randn(3, 128)
    with torch.inference_mode():  # the numbers the parts' own copies give (the twin's)
        for out, twin_part in zip(fused(x), (getattr(twin_owner, n) for n in names)):
            assert torch.equal(out, twin_part(x))


def test_layers_that_differ_are_not_fused(files):
    model = load(files, "target")  # layer 0's v is Q5_0 beside a Q8_0 q and k
    attn = model.model.layers[0].self_attn
    assert fuse([attn.q_proj, attn.k_proj, attn.v_proj]) is None  # block types
    assert fuse([attn.q_proj, attn.k_proj]) is not None
    assert fuse([attn.q_proj, model.model.layers[0].mlp.gate_proj]) is None  # bias or not
    dense = qwen2_for_fusing(1).model.layers[0].mlp
    assert fuse([dense.gate_proj, dense.up_proj]) is None  # dense layers would be copied


def test_lean_steps_with_fused_projections_give_the_same_logits(files):
    plain, fused = load(files, "draft"), load(files, "draft")
    keys = set(fused.state_dict())
    assert fuse_projections(fused) == 4  # q/k/v and gate/up in each of 2 layers
    assert fuse_projections(fused) == 0  # idempotent
    assert set(fused.state_dict()) == keys  # not submodules: state dicts and weight counts unchanged
    seq = torch.randint(0, 256, (120,), generator=torch.Generator().manual_seed(0)).tolist()
    expected, got = LeanSlot(plain), LeanSlot(fused)
    with torch.inference_mode():
        for start, end in [(0, 40), (40, 41), (41, 46), (46, 90), (90, 91), (91, 120)]:  # prefills, verifies, steps
            assert torch.equal(got.feed(seq[start:end]), expected.feed(seq[start:end]))
