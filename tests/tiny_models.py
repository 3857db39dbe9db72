"""Tiny random Qwen2 models and a character tokenizer, built in milliseconds for engine tests."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def tiny_model(seed: int, vocab: int = 48, hidden: int = 32, layers: int = 2,
               dtype: torch.dtype = torch.float64) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(dtype).eval()
    # Random init gives near-uniform logits; sharpen them so greedy paths are decisive
    # and sampling tests see a skewed, non-trivial distribution.
    with torch.no_grad():
        model.lm_head.weight.mul_(25.0)
    return model


class CharTokenizer:
    """id i <-> one printable character; enough for the engine's streaming decode."""

    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n()[]{}:=+-.,"

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.alphabet[i % len(self.alphabet)] for i in ids)

    def encode(self, text: str) -> list[int]:
        return [self.alphabet.index(c) for c in text]


def qwen2_for_fusing(seed: int, dtype: torch.dtype = torch.float32) -> Qwen2ForCausalLM:
    """A 2-layer Qwen2 whose k and v are 64 rows wide (packed int4 rows concatenate in
    blocks of 64 on AVX-512), weights drawn wide enough that quantization matters."""
    config = Qwen2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    return model.to(dtype)


def assert_same_logits_feed_after_feed(reference: Qwen2ForCausalLM, model: Qwen2ForCausalLM) -> None:
    """`model`'s lean steps and transformers' forward on it give `reference`'s lean logits
    bit for bit, over prefills, verifies and steps into one cache."""
    from lsp_server.engine.cache import KVSlot, LeanSlot

    seq = torch.randint(0, 256, (120,), generator=torch.Generator().manual_seed(0)).tolist()
    feeds = [(0, 40), (40, 41), (41, 46), (46, 90), (90, 91), (91, 120)]  # prefills, verifies, steps
    expected_slot, lean, transformers_path = LeanSlot(reference), LeanSlot(model), KVSlot(model)
    with torch.inference_mode():
        for start, end in feeds:
            expected = expected_slot.feed(seq[start:end])
            assert torch.equal(lean.feed(seq[start:end]), expected)
            assert torch.equal(transformers_path.feed(seq[start:end]), expected)
