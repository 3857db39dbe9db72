"""lean_step's forward computes what the model's own forward computes, feed after feed."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from lsp_server.engine.cache import KVSlot, LeanSlot, make_slot
from lsp_server.engine.lean_step import StaticKV, lean_forward, supports
from lsp_server.kernels.attention import use_packed_gqa
from tests.tiny_models import tiny_model

# (start, end) of each feed: a long prefill into an empty cache, a prefill after cached
# tokens (> 16 rows), verify-sized feeds, single steps, and enough tokens to outgrow the
# first 256-position allocation.
FEEDS = [(0, 40), (40, 41), (41, 45), (45, 70), (70, 71), (71, 84), (84, 250), (250, 270), (270, 271)]


def tiny_llama(seed: int) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).to(torch.float64).eval()


def tokens(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 48, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("packed", [False, True], ids=["sdpa", "packed-sdpa"])
@pytest.mark.parametrize("make", [tiny_model, tiny_llama], ids=["qwen2", "llama"])
def test_logits_match_the_models_own_forward_feed_after_feed(make, packed):
    model = make(3)
    if packed:
        assert use_packed_gqa(model)
    assert supports(model)
    reference, lean = KVSlot(model), LeanSlot(model)
    seq = tokens(FEEDS[-1][1])
    with torch.inference_mode():
        for start, end in FEEDS:
            expected, got = reference.feed(seq[start:end]), lean.feed(seq[start:end])
            assert got.shape == expected.shape == (end - start, 48)
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
        assert lean.kv.length == len(lean.ids) == FEEDS[-1][1]
        assert lean.kv.capacity >= 271


def test_a_rewind_then_different_tokens_is_the_same_as_computing_them_fresh():
    model = tiny_model(4)
    lean = LeanSlot(model)
    first, second = tokens(60, seed=1), tokens(30, seed=2)
    with torch.inference_mode():
        lean.feed(first)
        lean.rewind(35)
        got = lean.feed(second, all_logits=False)
        expected = model(input_ids=torch.tensor([first[:35] + second])).logits[0, -1:]
    assert lean.ids == first[:35] + second
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("stop_at", [2, 4])  # before the second layer; before the head
def test_a_pass_stopped_between_layers_leaves_the_cache_as_it_was(stop_at):
    model = tiny_model(5, layers=3)
    kv = StaticKV(model)
    seq = tokens(20, seed=3)

    class Stop(Exception):
        pass

    calls = 0

    def stop_in_second_layer() -> None:
        nonlocal calls
        calls += 1
        if calls == stop_at:
            raise Stop()

    with torch.inference_mode():
        lean_forward(model, kv, torch.tensor(seq[:10]), all_logits=False)
        with pytest.raises(Stop):
            lean_forward(model, kv, torch.tensor(seq[10:]), all_logits=False, between_layers=stop_in_second_layer)
        assert kv.length == 10
        got = lean_forward(model, kv, torch.tensor(seq[10:]), all_logits=False)
        expected = model(input_ids=torch.tensor([seq])).logits[0, -1:]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_a_reset_slot_frees_its_cache_and_starts_again():
    lean = LeanSlot(tiny_model(6))
    with torch.inference_mode():
        lean.feed(tokens(10))
        lean.reset()
        assert lean.kv.keys is None and lean.ids == []
        got = lean.feed(tokens(5), all_logits=False)
        expected = lean.model(input_ids=torch.tensor([tokens(5)])).logits[0, -1:]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def sliding_window_qwen2() -> Qwen2ForCausalLM:
    cfg = Qwen2Config(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True,
                      sliding_window=8, max_window_layers=0)
    return Qwen2ForCausalLM(cfg).eval()


def dynamic_rope_llama() -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("make", [sliding_window_qwen2, dynamic_rope_llama, lambda: torch.nn.Linear(2, 2)],
                         ids=["sliding-window", "dynamic-rope", "not-a-decoder"])
def test_models_it_does_not_cover_keep_the_standard_forward(make):
    model = make()
    assert not supports(model)
    if hasattr(model, "config"):
        assert type(make_slot(model, lean=True)) is KVSlot


def test_the_lean_slot_is_only_taken_when_asked_for():
    model = tiny_model(7)
    assert type(make_slot(model, lean=True)) is LeanSlot
    assert type(make_slot(model, lean=False)) is KVSlot


def test_the_wide_path_starts_later_on_avx2_and_above_every_verify():
    from lsp_server.engine import lean_step

    assert lean_step.wide_rows("avx2") == lean_step.WIDE_ROWS_AVX2
    assert lean_step.wide_rows("avx512") == lean_step.wide_rows("neon") == lean_step.WIDE_ROWS
    for variant in ("scalar", "avx2", "avx512", "neon"):
        assert lean_step.wide_rows(variant) > lean_step.ROW_BY_ROW_MAX_ROWS
