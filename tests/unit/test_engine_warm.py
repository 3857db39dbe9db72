"""A warm (max_new_tokens 0) loads the prompt into both models' caches and nothing else;
the request after it prefills nothing (the warm's next-token logits are kept) and
produces what a cold engine produces; a warm never throws away another prompt's cache to do it."""

from __future__ import annotations

from dataclasses import replace

import torch

from lsp_server.engine.cache import PROTECTED_TOKENS, SlotPool
from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule
from tests.tiny_models import CharTokenizer, tiny_model

torch.set_grad_enabled(False)
POLICY = DraftPolicy(context="t", k_init=3, k_max=3, max_new_tokens=24, stop=StopRule("none"),
                     mode="fixed", draft_p_min=0.0, prompt_lookup=False)
WARM = replace(POLICY, max_new_tokens=0)
PROMPT = tuple((i * 7) % 48 for i in range(120))


def make_engine() -> SpeculativeEngine:
    return SpeculativeEngine(tiny_model(1), tiny_model(2, hidden=16, layers=1), CharTokenizer(),
                             stop_ids=[], options=EngineOptions(prefill_chunk=64, warm_chunk=32))


def final(events) -> Finished:
    events = list(events)
    assert isinstance(events[-1], Finished)
    return events[-1]


def test_a_warm_prefills_both_models_and_generates_nothing():
    engine = make_engine()
    done = final(engine.generate(CompletionRequest("w", PROMPT, WARM)))
    assert done.reason == "warm" and done.text == "" and done.token_ids == ()
    assert done.stats.prefilled_tokens == len(PROMPT)
    assert any(slot.ids == list(PROMPT) for slot in engine.pool.slots)
    # the draft's: the prompt (what it drafted after it at rest is kept apart: test_engine_ahead.py)
    assert done.stats.ahead_tokens and any(slot.ids == list(PROMPT) for slot in engine.drafter.pool.slots)


def test_the_request_after_a_warm_prefills_nothing_and_matches_a_cold_engine():
    warmed = make_engine()
    final(warmed.generate(CompletionRequest("w", PROMPT, WARM)))
    after = final(warmed.generate(CompletionRequest("r", PROMPT, POLICY)))
    cold = final(make_engine().generate(CompletionRequest("c", PROMPT, POLICY)))
    assert after.stats.prefilled_tokens == 0  # the warm's own next-token logits
    assert after.token_ids == cold.token_ids and after.token_ids


def test_an_aborted_warm_keeps_the_chunks_it_finished():
    engine = make_engine()

    def abort_after_a_chunk() -> bool:  # polled between layers: lands inside the next chunk
        return any(slot.ids for slot in engine.pool.slots)

    done = final(engine.generate(CompletionRequest("w", PROMPT, WARM), abort_after_a_chunk))
    assert done.reason == "aborted"
    cached = max(len(slot.ids) for slot in engine.pool.slots)
    assert 0 < cached < len(PROMPT) and cached % 32 == 0
    after = final(engine.generate(CompletionRequest("r", PROMPT, POLICY)))
    assert after.stats.prefilled_tokens == len(PROMPT) - cached


def test_a_warm_takes_another_slot_rather_than_cut_a_cached_prompt():
    pool = SlotPool(tiny_model(3), size=2)
    kept = pool.acquire(PROMPT)
    kept.extend(list(PROMPT) * 4)  # a long cached prompt
    other = tuple(list(PROMPT[:4]) + [1] * 20)  # shares 4 tokens: would cut ~470
    assert len(kept.ids) - 4 > PROTECTED_TOKENS
    assert pool.acquire(other, protect=True) is not kept
    assert pool.acquire(other) is not kept  # a real request too: it would reuse 4 of ~470 tokens
    longer = tuple(list(PROMPT) * 4 + [1] * 8)  # grows the cached prompt at its end
    assert pool.acquire(longer) is kept and pool.acquire(longer, protect=True) is kept


def test_a_prompt_sharing_only_its_first_token_leaves_a_short_cached_prompt_alone():
    # FIM prompts all start with <|fim_prefix|>: a file's whole window and the cursor's short
    # one share that token, and the short one must still be there for the request.
    pool = SlotPool(tiny_model(3), size=3)
    short = pool.acquire(PROMPT)
    short.extend(PROMPT)
    whole = tuple([PROMPT[0]] + [1] * 300)
    for protect in (True, False):
        taken = pool.acquire(whole, protect=protect)
        assert taken is not short
        taken.extend(whole)
        assert tuple(short.ids) == tuple(PROMPT)
        taken.reset()
    typed = tuple(list(PROMPT[:-2]) + [2, 3, 4])  # the same prompt, its last tokens typed over
    assert pool.acquire(typed) is short


def test_the_pool_keeps_several_prompts_within_its_budget_and_empties_the_oldest_first():
    pool = SlotPool(tiny_model(3), size=4, positions=3 * len(PROMPT))
    prompts = [tuple([n] + list(PROMPT[1:])) for n in range(40, 45)]  # nothing shared past id 0
    for prompt in prompts[:3]:
        pool.acquire(prompt).extend(prompt)
    assert pool.held() == 3 * len(PROMPT)  # three files' prompts cached side by side
    assert {tuple(slot.ids) for slot in pool.slots} >= set(prompts[:3])
    pool.acquire(prompts[0])  # used again: now the newest
    pool.acquire(prompts[3]).extend(prompts[3])  # a fourth: the least recently used goes
    cached = {tuple(slot.ids) for slot in pool.slots}
    assert prompts[1] not in cached and {prompts[0], prompts[2], prompts[3]} <= cached
    assert pool.held() <= 3 * len(PROMPT)


def test_a_warm_that_keeps_the_cached_prompts_cuts_none_of_them():
    # With other files' head in front, the whole window shares that head with the cursor's
    # short one: a plain warm may cut the short window's tail, one that keeps may not.
    pool = SlotPool(tiny_model(3), size=2)
    short = pool.acquire(PROMPT)
    short.extend(PROMPT)
    whole = tuple(list(PROMPT[:100]) + [1] * 200)  # the same head, 20 tokens of it differ
    assert pool.acquire(whole, protect=True) is short
    assert pool.acquire(whole, protect=True, keep=True) is not short


def test_a_slot_keeps_its_last_logits_only_while_its_cache_ends_where_they_were_computed():
    slot = make_engine().pool.slots[0]
    _, logits = slot.extend(PROMPT)
    assert slot.kept_logits() is not None and torch.equal(slot.sync(PROMPT), logits)
    slot.feed([1, 2, 3])  # a verify's rows: the last one's logits kept, copied
    assert slot.kept_logits().shape == logits.shape
    slot.rewind(len(PROMPT))
    assert slot.kept_logits() is None
    again = slot.sync(PROMPT)  # fed the last token again
    assert slot.ids == list(PROMPT) and torch.allclose(again, logits, atol=1e-5)
