"""Token healing: which tokens may spell out a healed text, and an engine that must start its
output with it: the text is generated (held to the healed text) but never shown, and
speculation stays lossless."""

from __future__ import annotations

import pytest
import torch

from lsp_server.engine.healing import TokenTexts, mask_to, remaining
from lsp_server.engine.speculative import SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule, TextDelta
from tests.tiny_models import CharTokenizer, tiny_model

torch.set_grad_enabled(False)

TEXTS = ["    ", "   ", " ", " try", "try", "   try", "\n", "", " False", "F", "<|eos|>"]


def test_allowed_tokens_cover_the_rest_or_are_leading_pieces_of_it():
    texts = TokenTexts(TEXTS, excluded=[10])
    # Starting with "    ": only "    " itself; leading pieces: " ", "   ".
    assert sorted(texts.allowed("    ")) == sorted([0, 1, 2])
    # " " starts " ", " try", "    ", "   ", "   try", " False".
    assert sorted(texts.allowed(" ")) == sorted([0, 1, 2, 3, 5, 8])
    assert texts.allowed("<|") == []  # excluded ids (stop tokens) never qualify
    assert texts.text(7) is None  # a token without text cannot spell anything


def test_remaining_text_after_each_kind_of_token():
    assert remaining("    ", "   ") == " "
    assert remaining(" ", " try") == ""
    assert remaining("    ", "    ") == ""


def test_mask_keeps_only_the_allowed_logits():
    masked = mask_to(torch.tensor([1.0, 5.0, 3.0, 4.0]), [0, 2])
    assert int(masked.argmax()) == 2
    assert torch.isinf(masked[1]) and torch.isinf(masked[3])


def generate(engine, prompt, heal, k, mode="fixed", n=16):
    policy = DraftPolicy(context="test", k_init=k, k_min=1, k_max=max(k, 1), max_new_tokens=n,
                         stop=StopRule("none"), draft_p_min=0.0, mode=mode, prompt_lookup=False)
    events = list(engine.generate(CompletionRequest("r", tuple(prompt), policy, heal=heal)))
    final = events[-1]
    assert isinstance(final, Finished)
    return final, [e for e in events if isinstance(e, TextDelta)]


@pytest.mark.parametrize("k", [1, 3, 6])
def test_healed_output_starts_with_the_text_is_not_shown_and_stays_lossless(k):
    target, draft = tiny_model(seed=1), tiny_model(seed=2)
    tokenizer = CharTokenizer()
    prompt = tokenizer.encode("def f(x):\n    return x")
    heal = " ("  # two single-character tokens to spell out
    plain, _ = generate(SpeculativeEngine(target, draft, tokenizer, stop_ids=[]), prompt, heal, 0, mode="off")
    spec, deltas = generate(SpeculativeEngine(target, draft, tokenizer, stop_ids=[]), prompt, heal, k)
    full = tokenizer.decode(spec.token_ids)
    assert full.startswith(heal) and spec.text == full[len(heal):]
    assert spec.token_ids == plain.token_ids and spec.text == plain.text
    assert "".join(d.delta for d in deltas) == spec.text  # the healed text is never streamed
    assert spec.stats.plain_rounds >= 1  # the second healed character came from a held step


def test_without_healing_the_model_may_start_anywhere():
    target = tiny_model(seed=1)
    tokenizer = CharTokenizer()
    prompt = tokenizer.encode("def f(x):\n    return x")
    free, _ = generate(SpeculativeEngine(target, None, tokenizer, stop_ids=[]), prompt, "", 0, mode="off")
    held, _ = generate(SpeculativeEngine(target, None, tokenizer, stop_ids=[]), prompt, "zz", 0, mode="off")
    assert tokenizer.decode(held.token_ids).startswith("zz")
    assert not tokenizer.decode(free.token_ids).startswith("zz")


def test_sampled_output_is_held_to_the_healed_text_too():
    target, draft = tiny_model(seed=1), tiny_model(seed=2)
    tokenizer = CharTokenizer()
    policy = DraftPolicy(context="test", k_init=3, k_min=1, k_max=3, max_new_tokens=12,
                         stop=StopRule("none"), draft_p_min=0.0, mode="fixed", prompt_lookup=False)
    engine = SpeculativeEngine(target, draft, tokenizer, stop_ids=[])
    for seed in range(5):
        request = CompletionRequest(f"s{seed}", tuple(tokenizer.encode("x = [")), policy,
                                    temperature=1.0, seed=seed, heal="1 + ")
        final = list(engine.generate(request))[-1]
        full = tokenizer.decode(final.token_ids)
        assert full.startswith("1 + ") and final.text == full[4:]


def test_a_healed_text_no_token_can_spell_is_a_clear_error():
    tokenizer = CharTokenizer()  # its 48-token vocabulary has no "," (the 50th character)
    engine = SpeculativeEngine(tiny_model(seed=1), None, tokenizer, stop_ids=[])
    request = CompletionRequest("r", tuple(tokenizer.encode("f(a")), DraftPolicy(mode="off"), heal=", ")
    with pytest.raises(ValueError, match="fimMode"):
        list(engine.generate(request))
