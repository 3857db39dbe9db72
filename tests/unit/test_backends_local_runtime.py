"""Pieces of engine assembly that need no model weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tokenizers import AddedToken

from lsp_server.backends.local_runtime import CPU_AUTO_QUANT, CPU_FALLBACK_QUANT, resolve_quant, special_token_ids


def test_every_special_added_token_stops_generation_but_ordinary_added_tokens_do_not() -> None:
    # Qwen2.5-Coder has 20 special added tokens; a completion once printed <|fim_pad|> x8
    # when only the end-of-text and three FIM markers stopped it.
    tokenizer = SimpleNamespace(added_tokens_decoder={
        151643: AddedToken("<|endoftext|>", special=True),
        151662: AddedToken("<|fim_pad|>", special=True),
        151664: AddedToken("<|file_sep|>", special=True),
        151700: AddedToken("my_word", special=False),
    })
    assert special_token_ids(tokenizer) == {151643, 151662, 151664}


@pytest.mark.parametrize("role", ["target", "draft"])
def test_auto_quantization_follows_the_device(role: str) -> None:
    import torch

    from lsp_server.kernels.w8a8 import w8a8_available

    expected = CPU_AUTO_QUANT[role] if w8a8_available() else CPU_FALLBACK_QUANT[role]
    assert resolve_quant("auto", role, "cpu", torch.bfloat16) == expected
    assert resolve_quant("auto", role, "cuda", torch.bfloat16) == "bf16"
    assert resolve_quant("auto", role, "cpu", torch.float32) == "bf16"
    assert resolve_quant("int8", role, "cpu", torch.bfloat16) == "int8"


def test_round_costs_from_a_busy_moment_are_not_used() -> None:
    from lsp_server.backends.local_runtime import plausible
    from lsp_server.engine.costs import RowCosts

    assert plausible(RowCosts(target=(0.030, 0.031, 0.032), draft=0.012))
    # Another process had the cores: the 0.5B draft "cost" more than the 1.5B target.
    assert not plausible(RowCosts(target=(0.35, 0.32, 0.33), draft=1.43))
