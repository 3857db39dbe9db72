"""Type-through and precomputed answers (engine.lineage): a request whose prompt is an
earlier greedy request's prompt plus that request's first tokens gets exactly what a
fresh request gets, with the known tokens taken from the earlier generation (no model
call for them), including where the healed text splits a token."""

from __future__ import annotations

import random

import pytest
import torch

from lsp_server.engine.lineage import Lineage, known_continuation
from lsp_server.engine.speculative import SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule, TextDelta
from tests.tiny_models import tiny_model

torch.set_grad_enabled(False)

# Single characters plus tokens that a typed character can split (" F" | "alse").
VOCAB = list("abcdefghijklmnopqrstuvwxyz ():\n=+-.,") + [
    " F", " Fa", " False", "alse", " re", " return", "turn", "ret", "  ", "    ", "x)"]
assert len(VOCAB) == 47
VOCAB.append("<eos>")
EOS = 47


class WordTokenizer:
    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(VOCAB[i] for i in ids)


def text_of(token: int) -> str | None:
    return None if token == EOS else VOCAB[token]


def policy(n: int = 12, stop: str = "none") -> DraftPolicy:
    return DraftPolicy(context="test", k_init=3, k_min=1, k_max=4, max_new_tokens=n,
                       stop=StopRule(stop), draft_p_min=0.0, mode="fixed", prompt_lookup=False)


def engine(seed: int = 1) -> SpeculativeEngine:
    return SpeculativeEngine(tiny_model(seed=seed), tiny_model(seed=seed + 50, hidden=16, layers=1),
                             WordTokenizer(), stop_ids=[EOS])


def run(eng, prompt, heal="", n=12, rid="r", stop="none", background=False) -> tuple[Finished, list]:
    request = CompletionRequest(rid, tuple(prompt), policy(n, stop), heal=heal, background=background)
    events = list(eng.generate(request))
    assert isinstance(events[-1], Finished)
    return events[-1], [e for e in events if isinstance(e, TextDelta)]


def test_a_record_knows_the_rest_after_its_own_first_tokens():
    record = Lineage((1, 2), "", (5, 6, 7), None)
    assert known_continuation(record, (1, 2), "", text_of) == (5, 6, 7)
    assert known_continuation(record, (1, 2, 5, 6), "", text_of) == (7,)
    assert known_continuation(record, (1, 2, 6), "", text_of) == ()  # not its tokens
    assert known_continuation(record, (1,), "", text_of) == ()  # a shorter prompt


def test_a_typed_character_inside_a_token_heals_onto_that_token():
    # Old: after the prompt, " False" then ".". The user typed " F": the new prompt ends on
    # the same ids and heals " F"; " False" spells it out, so the rest is known.
    false, dot = VOCAB.index(" False"), VOCAB.index(".")
    record = Lineage((1, 2), "", (false, dot), EOS)
    assert known_continuation(record, (1, 2), " F", text_of) == (false, dot, EOS)
    # Typed " Fx": " False" cannot spell it, so nothing is known.
    assert known_continuation(record, (1, 2), " Fx", text_of) == ()


def test_an_unmasked_request_learns_nothing_from_a_masked_choice():
    false = VOCAB.index(" False")
    record = Lineage((1, 2), " F", (false,), None)  # " False" was chosen among " F..." only
    assert known_continuation(record, (1, 2), "", text_of) == ()
    # ...but a request held to more of the same text may take it.
    assert known_continuation(record, (1, 2), " Fa", text_of) == (false,)


def test_the_stop_token_is_known_only_once_both_heals_are_spelled():
    a = VOCAB.index("a")
    record = Lineage((1,), "", (a,), EOS)
    assert known_continuation(record, (1,), "", text_of) == (a, EOS)
    assert known_continuation(record, (1, a), "", text_of) == (EOS,)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_typed_prefix_gets_what_a_fresh_request_gets(seed):
    rng = random.Random(seed)
    prompt = rng.choices(range(40), k=10)
    warm = engine()
    first, _ = run(warm, prompt, n=10)
    tokens = list(first.token_ids)
    assert tokens  # some end on the stop token early: that case is covered too
    for j in range(len(tokens) + 1):
        # Heal with nothing, with part of the next token's text, with all of it.
        nxt = VOCAB[tokens[j]] if j < len(tokens) else ""
        for heal in {"", nxt[:1], nxt}:
            new_prompt = prompt + tokens[:j]
            got, deltas = run(warm, new_prompt, heal, n=10, rid=f"t{j}")
            fresh, _ = run(engine(), new_prompt, heal, n=10)
            assert got.token_ids == fresh.token_ids and got.text == fresh.text, (j, heal)
            assert (deltas[-1].text if deltas else "") == got.text
            if heal == nxt or not heal:
                assert got.stats.known_tokens > 0 or j == len(tokens)


def test_an_answer_known_in_full_needs_no_model_call():
    eng = engine()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    first, _ = run(eng, prompt, n=12)
    tokens = list(first.token_ids)
    # Typing two of the predicted tokens: the new request's budget of 6 lies within them.
    got, deltas = run(eng, prompt + tokens[:2], n=6)
    assert got.token_ids == tuple(tokens[2:8])
    assert got.stats.rounds == 0 and got.stats.prefilled_tokens == 0
    assert got.stats.known_tokens == 6 and got.stats.known_source == "generation"
    assert deltas and deltas[-1].text == got.text


def test_a_split_token_falls_back_to_the_model_and_stays_exact():
    eng = engine(seed=4)
    prompt = [VOCAB.index(c) for c in "def f(x):\n    "]
    first, _ = run(eng, prompt, n=8)
    tokens = list(first.token_ids)
    text = VOCAB[tokens[0]]
    # The builder tokenized the typed character on its own (another id than the old token):
    # the prompt's ids differ, so nothing is known and the model answers.
    other = next(i for i, t in enumerate(VOCAB[:47]) if t == text[:1] and i != tokens[0]) \
        if len(text) > 1 else VOCAB.index("(")
    got, _ = run(eng, prompt + [other], n=8)
    fresh, _ = run(engine(seed=4), prompt + [other], n=8)
    assert got.token_ids == fresh.token_ids and got.stats.known_tokens == 0


def test_a_stop_rule_applies_to_the_new_position():
    eng = engine(seed=2)
    prompt = [VOCAB.index(c) for c in "x = (a, b"]
    first, _ = run(eng, prompt, n=16, stop="statement")
    tokens = list(first.token_ids)
    for j in range(len(tokens)):
        got, _ = run(eng, prompt + tokens[:j], n=16, stop="statement", rid=f"s{j}")
        fresh, _ = run(engine(seed=2), prompt + tokens[:j], n=16, stop="statement")
        assert (got.text, got.reason) == (fresh.text, fresh.reason)


def test_a_background_generation_is_counted_as_a_precompute():
    eng = engine()
    prompt = [7, 7, 8, 9]
    run(eng, prompt, n=8, background=True)
    got, _ = run(eng, prompt, n=8)
    assert got.stats.known_source == "background" and got.stats.rounds == 0


def test_sampled_requests_never_reuse_a_generation():
    eng = engine()
    prompt = [2, 4, 6, 8]
    run(eng, prompt, n=8)
    request = CompletionRequest("s", tuple(prompt), policy(8), temperature=0.8, seed=3)
    final = list(eng.generate(request))[-1]
    assert final.stats.known_tokens == 0 and final.stats.rounds > 0
