"""Packed grouped-query attention gives transformers' `sdpa` results, and is used where meant."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.integrations import sdpa_attention

from lsp_server.engine.speculative import SpeculativeEngine
from lsp_server.kernels.attention import NAME, PACKED_MAX_ROWS, use_packed_gqa
from tests.tiny_models import CharTokenizer, tiny_model
from tests.unit.test_engine_greedy import plain_greedy, policy, run


def _logits_after(model, prompt: list[int], rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of a prompt fed at once, then of `rows` fed onto its cache."""
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        first = model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True).logits[0]
        then = model(input_ids=torch.tensor([rows]), cache=cache, use_cache=True).logits[0]
    return first, then


@pytest.mark.parametrize("rows", [1, 2, 5, PACKED_MAX_ROWS, PACKED_MAX_ROWS + 3])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_packed_matches_sdpa(rows: int, kv_heads: int) -> None:
    model = tiny_model(3, vocab=40, hidden=32, layers=2)
    model.config.num_key_value_heads = kv_heads
    model = type(model)(model.config).to(torch.float64).eval()  # rebuilt with kv_heads
    prompt = [(7 * i) % 40 for i in range(23)]
    step = [(3 * i + 1) % 40 for i in range(rows)]
    expected = _logits_after(model, prompt, step)
    assert use_packed_gqa(model)
    assert model.config._attn_implementation == NAME
    got = _logits_after(model, prompt, step)
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_decode_steps_take_the_packed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model(4)
    use_packed_gqa(model)
    standard_rows: list[int] = []
    original = sdpa_attention.sdpa_attention_forward

    def spy(module, query, *args, **kwargs):
        standard_rows.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", spy)
    _logits_after(model, list(range(30)), [1, 2, 3, 4])
    # The prefill (30 rows, empty cache) in each of the 2 layers; the 4-row step never.
    assert standard_rows == [30, 30]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_speculative_output_unchanged(k: int) -> None:
    """Greedy speculative decoding with packed attention equals plain greedy with `sdpa`."""
    target = tiny_model(1)
    prompt = [5, 9, 2, 17, 30, 4, 11]
    reference = plain_greedy(target, prompt, 24)
    draft = tiny_model(2, hidden=16, layers=1)
    for model in (target, draft):
        use_packed_gqa(model)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    assert list(run(engine, prompt, policy(k)).token_ids) == reference


def test_other_implementations_are_left_alone() -> None:
    model = tiny_model(5)
    model.set_attn_implementation("eager")
    assert not use_packed_gqa(model)
    assert model.config._attn_implementation == "eager"


def test_a_model_that_cannot_switch_keeps_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model(6)

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not supported by this model")

    monkeypatch.setattr(model, "set_attn_implementation", refuse)
    assert not use_packed_gqa(model)
    assert model.config._attn_implementation == "sdpa"
