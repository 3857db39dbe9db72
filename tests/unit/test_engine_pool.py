"""The pool of earlier prompts and generations drafts for free, and greedy output stays the
target's own, token for token, whatever it proposes."""

from __future__ import annotations

import random

import pytest
import torch

from lsp_server.engine.costs import RowCosts
from lsp_server.engine.speculative import FREE_DRAFT_MAX, EngineOptions, SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule
from tests.tiny_models import CharTokenizer, tiny_model
from tests.unit.test_engine_greedy import plain_greedy
from tests.unit.test_engine_lookup_only import ForwardCounter

torch.set_grad_enabled(False)


def free_only(n: int = 24, mode: str = "fixed", model_draft: bool = False) -> DraftPolicy:
    return DraftPolicy(context="test", k_init=4, k_min=1, k_max=8, max_new_tokens=n,
                       stop=StopRule("none"), draft_p_min=0.0, mode=mode, prompt_lookup=True,
                       model_draft=model_draft)


def generate(engine: SpeculativeEngine, prompt: list[int], policy: DraftPolicy, rid: str = "r") -> Finished:
    final = list(engine.generate(CompletionRequest(rid, tuple(prompt), policy)))[-1]
    assert isinstance(final, Finished)
    return final


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=1)


def test_an_earlier_generation_is_proposed_again_and_output_stays_lossless(target):
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    prompt = random.Random(3).choices(range(48), k=40)
    first = generate(engine, prompt, free_only())
    made = list(first.token_ids)
    # The same code written again further down: another start, then the same text, and
    # the first few tokens of the earlier answer typed by hand.
    again = [5, 6, 7] + prompt + made[:6]
    second = generate(engine, again, free_only(), rid="again")
    assert list(second.token_ids) == plain_greedy(target, again, 24)
    pool = second.stats.drafters["pool"]
    assert pool.drafted > 0 and pool.accepted > 0
    assert second.stats.rounds < 24 - 1  # fewer target steps than plain decoding


def test_the_pool_needs_prompt_lookup_enabled(target):
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    prompt = random.Random(4).choices(range(48), k=40)
    made = list(generate(engine, prompt, free_only()).token_ids)
    off = DraftPolicy(context="t", max_new_tokens=12, stop=StopRule("none"), mode="fixed",
                      prompt_lookup=False, model_draft=False)
    again = [9] + prompt + made[:4]
    final = generate(engine, again, off, rid="off")
    assert final.stats.drafted == 0
    assert list(final.token_ids) == plain_greedy(target, again, 12)


def test_garbage_from_the_pool_is_rejected_at_the_cost_of_one_verify_a_round(target):
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    rng = random.Random(5)
    prompt = rng.choices(range(48), k=30)
    # Binary-looking text seen before with this prompt's tail and the target's first token:
    # the pool proposes what followed them there, which the target has no reason to agree with.
    seen = prompt[-20:] + plain_greedy(target, prompt, 1)
    engine.history.see_prompt(rng.choices(range(48), k=200) + seen + rng.choices(range(48), k=500))
    expected = plain_greedy(target, prompt, 20)
    counter = ForwardCounter(target)
    final = generate(engine, prompt, free_only(n=20))
    assert list(final.token_ids) == expected
    assert final.stats.drafters["pool"].drafted > 0
    assert counter.calls == 1 + final.stats.rounds  # the prefill, then one feed a round


def test_a_10000_token_match_drafts_at_most_the_cap_a_round(target):
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    text = [(i * 7 + i // 48) % 48 for i in range(10_000)]
    engine.history.see_prompt(text)
    prompt = text[:200]
    final = generate(engine, prompt, free_only(n=40))
    assert list(final.token_ids) == plain_greedy(target, prompt, 40)
    assert final.stats.drafted > 0
    assert max(final.stats.k_trace) <= FREE_DRAFT_MAX


def test_the_pool_memory_stays_fixed_over_many_requests(target):
    options = EngineOptions(pool_tokens=1 << 10, pool_output_tokens=1 << 8)
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[], options=options)
    size = engine.history.snapshot()["bytes"]
    rng = random.Random(6)
    warm = DraftPolicy(context="t", max_new_tokens=0)
    for i in range(40):  # 8,000 prompt tokens through a pool of 1,024
        generate(engine, rng.choices(range(48), k=200), warm, rid=f"w{i}")
    held = engine.history.snapshot()
    assert held["bytes"] == size and held["prompt_tokens_held"] == 1 << 10
    assert held["tokens_seen"] > 8000
    engine.clear_caches()
    assert engine.history.snapshot()["tokens_seen"] == 0


def test_with_costs_each_round_picks_a_source_and_stays_lossless(target):
    draft = tiny_model(seed=3, hidden=16, layers=1)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    rng = random.Random(7)
    prompts = [rng.choices(range(12), k=40) for _ in range(4)]  # small alphabet: matches
    for i, prompt in enumerate(prompts):
        # Flat verifies, a draft step a tenth of a target step: free drafts pay when right
        engine.costs = RowCosts(target=(1.0,) * 9, draft=0.1, draft_prefill=0.01)
        final = generate(engine, prompt, free_only(n=28, mode="adaptive", model_draft=True), rid=f"c{i}")
        assert list(final.token_ids) == plain_greedy(target, prompt, 28)
        s = final.stats
        assert s.drafted == sum(d.drafted for d in s.drafters.values())
        assert set(s.drafters) <= {"draft", "lookup", "pool"}
    assert "free_position_acceptance" in engine.memory.snapshot()["test/none"]
