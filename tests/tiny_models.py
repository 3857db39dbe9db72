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


def qwen2_for_fusing(seed: int, dtype: torch.dtype = torch.float32, hidden: int = 128,
                     ffn: int = 256) -> Qwen2ForCausalLM:
    """A 2-layer Qwen2 whose matrices are whole GGUF blocks wide (K = 128, 256 by default) and
    whole groups of 8 rows tall (the native kernels' repacking), weights drawn wide enough that
    quantization matters."""
    config = Qwen2Config(vocab_size=256, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    return model.to(dtype)
