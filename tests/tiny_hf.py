"""A tiny FIM-capable model pair on disk (HF format) for end-to-end server tests.

Byte-level tokenizer (256 byte tokens + Qwen's FIM/stop specials) and two random Qwen2
models whose output head favours lowercase letters and spaces, so completions are
printable, single-line and never end early: long enough to stream and to cancel.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|im_end|>",
            "<|repo_name|>", "<|file_sep|>"]
FAVOURED = b"abcdefghijklmnopqrstuvwxyz "


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def tiny_causal_lm(seed: int, vocab: int, hidden: int, layers: int) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8192, tie_word_embeddings=False,
                      eos_token_id=0, bos_token_id=0)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        mask = torch.zeros(vocab, 1)
        mask[list(FAVOURED)] = 1.0
        model.lm_head.weight.mul_(mask * 40.0)  # other rows -> logit 0, below the favoured max
    return model


def make_tiny_pair(root: Path) -> tuple[Path, Path]:
    tokenizer = tiny_tokenizer()
    vocab = len(tokenizer)
    dirs = []
    for name, seed, hidden, layers in (("target", 1, 64, 2), ("draft", 2, 32, 1)):
        path = root / name
        tiny_causal_lm(seed, vocab, hidden, layers).save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(path)
    return dirs[0], dirs[1]
