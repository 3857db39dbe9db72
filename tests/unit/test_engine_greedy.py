"""Greedy speculative output is token-for-token the target's own greedy output."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule
from tests.tiny_models import CharTokenizer, tiny_model

torch.set_grad_enabled(False)
NO_STOP = StopRule("none")


def plain_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Reference: full recomputation every step, no KV cache, no speculation."""
    ids = list(prompt)
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def run(engine: SpeculativeEngine, prompt, policy: DraftPolicy, rid: str = "r") -> Finished:
    events = list(engine.generate(CompletionRequest(rid, tuple(prompt), policy)))
    final = events[-1]
    assert isinstance(final, Finished)
    return final


def policy(k: int, mode: str = "fixed", lookup: bool = False, n: int = 24, **kw) -> DraftPolicy:
    return DraftPolicy(context="test", k_init=k, k_min=1, k_max=max(k, 1), max_new_tokens=n,
                       stop=NO_STOP, draft_p_min=0.0, mode=mode, prompt_lookup=lookup, **kw)


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=1)


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_speculation_matches_plain_greedy(target, k, seed):
    draft = tiny_model(seed=100 + seed, hidden=16, layers=1)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = random.Random(seed).choices(range(48), k=12)
    result = run(engine, prompt, policy(k))
    assert list(result.token_ids) == plain_greedy(target, prompt, 24)
    assert result.reason == "max-tokens"


def test_draft_equal_to_target_accepts_everything(target):
    engine = SpeculativeEngine(target, target, CharTokenizer(), stop_ids=[])
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    result = run(engine, prompt, policy(4, n=25))
    assert list(result.token_ids) == plain_greedy(target, prompt, 25)
    s = result.stats
    assert s.drafted > 0 and s.accepted == s.drafted
    assert s.mean_accepted_per_round == pytest.approx(4.0)  # every round: k accepted + 1 bonus


def test_useless_draft_accepts_nothing_and_stays_lossless(target):
    # A draft whose argmax is always a token the target never picks first.
    draft = tiny_model(seed=7, hidden=16, layers=1)
    with torch.no_grad():
        draft.lm_head.weight.zero_()
        draft.lm_head.bias = None
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = [5, 6, 7, 8]
    expected = plain_greedy(target, prompt, 20)
    result = run(engine, prompt, policy(3, n=20))
    assert list(result.token_ids) == expected
    # Zero logits -> the draft proposes token 0 everywhere: replay every round and check
    # it accepted exactly the run of 0s the target itself produces at those positions.
    s = result.stats
    lengths = iter(s.accepted_lengths)
    i = len(expected) - sum(1 + n for n in s.accepted_lengths) - s.k_trace.count(0)
    assert i in (0, 1)  # the first token may come from the prefill's logits
    for k in s.k_trace:
        n = next(lengths) if k else 0
        zeros = next((j for j, t in enumerate(expected[i:i + k]) if t != 0), len(expected[i:i + k]))
        assert n == zeros, (i, k, n)
        i += n + 1
    assert s.accepted == sum(s.accepted_lengths) and s.drafted == sum(s.k_trace) > 0


@pytest.mark.parametrize("k", [2, 5, 8])
def test_prompt_lookup_is_lossless_on_repetitive_prompts(target, k):
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    prompt = [1, 2, 3, 4, 5, 6] * 4 + [1, 2, 3]
    result = run(engine, prompt, policy(k, lookup=True, n=30))
    assert list(result.token_ids) == plain_greedy(target, prompt, 30)
    assert result.stats.drafters["lookup"].drafted > 0


def test_adaptive_mode_with_both_drafters_is_lossless(target):
    draft = tiny_model(seed=3, hidden=16, layers=1)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    for seed in range(4):
        prompt = random.Random(seed).choices(range(10), k=30)  # small alphabet -> n-gram hits
        pol = DraftPolicy(context="t", k_init=3, k_min=1, k_max=8, max_new_tokens=28,
                          stop=NO_STOP, draft_p_min=0.3, mode="adaptive", prompt_lookup=True,
                          entropy_high=2.0, entropy_low=1.0)
        assert list(run(engine, prompt, pol).token_ids) == plain_greedy(target, prompt, 28)


def test_kv_cache_reuse_across_edits_at_the_end_is_lossless(target):
    draft = tiny_model(seed=4, hidden=16, layers=1)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    rng = random.Random(0)
    prompt = rng.choices(range(48), k=40)
    prefilled = []
    for step in range(8):
        # type a token, delete one, or replace the last few: what keystrokes do to a prompt
        action = step % 3
        if action == 0:
            prompt = prompt + [rng.randrange(48)]
        elif action == 1:
            prompt = prompt[:-1]
        else:
            prompt = prompt[:-3] + rng.choices(range(48), k=2)
        result = run(engine, prompt, policy(4, n=12), rid=f"r{step}")
        assert list(result.token_ids) == plain_greedy(target, prompt, 12)
        prefilled.append(result.stats.prefilled_tokens)
    assert max(prefilled[1:]) <= 4, prefilled  # only the edited tail is prefilled again


def test_plain_mode_off_never_drafts(target):
    engine = SpeculativeEngine(target, tiny_model(seed=5), CharTokenizer(), stop_ids=[])
    result = run(engine, [1, 2, 3], policy(4, mode="off", n=10))
    assert result.stats.drafted == 0 and result.stats.plain_rounds == 9
    assert list(result.token_ids) == plain_greedy(target, [1, 2, 3], 10)


def test_stop_id_ends_generation_without_emitting_it(target):
    prompt = [1, 2, 3]
    expected = plain_greedy(target, prompt, 10)
    stop = expected[4]
    engine = SpeculativeEngine(target, target, CharTokenizer(), stop_ids=[stop])
    result = run(engine, prompt, policy(4, n=10))
    assert list(result.token_ids) == expected[: expected.index(stop)]
    assert result.reason == "eos"


def test_max_k_caps_every_round_and_stays_lossless(target):
    draft = tiny_model(seed=2)
    prompt = list(range(1, 12))
    capped = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[], options=EngineOptions(max_k=2))
    final = run(capped, prompt, policy(6, mode="adaptive"))
    assert max(final.stats.k_trace) <= 2 and final.stats.drafted > 0
    assert list(final.token_ids) == plain_greedy(target, prompt, 24)


def test_a_cold_draft_whose_catch_up_costs_more_than_it_saves_is_not_run(target):
    from lsp_server.engine.costs import RowCosts

    draft = tiny_model(seed=3, hidden=16, layers=1)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = random.Random(5).choices(range(48), k=40)
    pol = policy(4, mode="adaptive", n=20)
    # Flat verifies and cheap draft steps: every round pays, but a token of catch-up costs
    # as much as a target step, so a cold 40-token catch-up outweighs what 20 tokens save.
    engine.costs = costs = RowCosts(target=(1.0,) * 6, draft=0.01, draft_prefill=1.0)
    cold = run(engine, prompt, pol)
    # the rounds begin after the prefill's token; a proposal feeds the newest token itself
    assert cold.stats.draft_skipped and cold.stats.draft_catch_up == len(prompt)
    assert cold.stats.drafted == 0  # neither model drafted (lookup is off in this policy)
    assert list(cold.token_ids) == plain_greedy(target, prompt, 20)
    # The same prompt after a warm, which leaves the draft holding the prompt and the
    # answer's first token (it drafted after it at rest): nothing to catch up, and it drafts.
    engine.clear_caches()
    list(engine.generate(CompletionRequest("w", tuple(prompt), replace(pol, max_new_tokens=0))))
    engine.costs = costs  # the same costs again: the cold run's rounds timed the tiny models live
    warm = run(engine, prompt, pol)
    assert not warm.stats.draft_skipped and warm.stats.draft_catch_up == 0
    assert warm.stats.drafted > 0 and list(warm.token_ids) == list(cold.token_ids)
    # Cold again, with a catch-up that pays: the draft catches up on the whole prompt in its
    # first round (the mid-answer rule, costs.catch_up_pays, leaves that one to draft_pays).
    engine.clear_caches()
    engine.costs = replace(costs, draft_prefill=1e-4)
    paid = run(engine, prompt, pol)
    assert not paid.stats.draft_skipped and paid.stats.draft_catch_up == len(prompt)
    assert paid.stats.drafters["draft"].drafted > 0 and paid.stats.k_trace[0] > 0
    assert paid.stats.catch_ups_skipped == 0 and list(paid.token_ids) == list(cold.token_ids)


def test_the_round_costs_follow_what_the_engines_own_rounds_take(target):
    from lsp_server.engine.costs import RowCosts

    engine = SpeculativeEngine(target, tiny_model(seed=2), CharTokenizer(), stop_ids=[])
    measured = RowCosts(target=(5.0,) * 6, draft=5.0, draft_prefill=5.0)  # far slower than tiny models
    engine.costs = measured
    prompt = random.Random(7).choices(range(48), k=40)
    final = run(engine, prompt, policy(2, n=24))  # fixed k: its verifies are 3-row feeds
    assert final.stats.speculative_rounds >= 3
    live = engine.costs
    # every cost now comes from the live rounds: 3-row feeds timed, the other row counts
    # scaled with them, draft steps, and the cold draft's 39-token catch-up
    assert max(live.target) < 1.0 and live.draft < 1.0 and live.draft_prefill < 1.0
    assert engine.live.measured == measured
    engine.costs = None
    assert engine.costs is None and engine.live is None


def test_no_round_drafts_past_where_this_contexts_answers_end(target):
    """Recent answers under the request's context and stop rule took 4 tokens: a round
    drafts at most what the answer likely still needs, and the output is unchanged."""
    from lsp_server.engine.controller import memory_key

    engine = SpeculativeEngine(target, target, CharTokenizer(), stop_ids=[])
    asked = policy(8, n=12)
    for _ in range(3):
        engine.memory.record_length(memory_key(asked), 4)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    result = run(engine, prompt, asked)
    assert list(result.token_ids) == plain_greedy(target, prompt, 12)
    first, *rest = result.stats.k_trace
    assert first <= 2  # 1 token generated of ~4: at most 3 more, one of them the target's own
    assert max(rest, default=0) == 8  # past every recorded answer: no limit


def test_a_draft_left_behind_by_free_drafts_is_not_caught_up_where_that_cannot_pay(target):
    """The pool drafts the first answer's 24 tokens again, so the draft model falls behind
    by every token it settles; a catch-up priced far above what the rounds save
    (costs.catch_up_pays) never runs, and the output is unchanged."""
    from lsp_server.engine.costs import RowCosts

    engine = SpeculativeEngine(target, tiny_model(seed=2), CharTokenizer(), stop_ids=[])
    prompt = random.Random(11).choices(range(48), k=30)
    pol = policy(4, mode="adaptive", lookup=True, n=24)
    list(engine.generate(CompletionRequest("w", tuple(prompt), replace(pol, max_new_tokens=0))))
    first = run(engine, prompt, pol, "a")
    engine.lineages.clear()  # asked again, answered by the rounds, not from the first answer
    engine.costs = RowCosts(target=(1.0,) * 6, draft=0.01, draft_prefill=10.0)
    again = run(engine, prompt, pol, "b")
    assert list(again.token_ids) == list(first.token_ids) == plain_greedy(target, prompt, 24)
    assert again.stats.drafters["pool"].accepted > 0 and again.stats.catch_ups_skipped > 0
    assert "draft" not in again.stats.drafters


def test_a_pool_draft_that_would_write_the_text_after_the_cursor_again_is_not_verified(target):
    """The pool saw the document whole (an earlier prompt), where the text before the cursor
    runs into the text after it: asked at the cursor with that text as the request's
    suffix, the first token's match would propose the suffix itself. It is dropped (without
    the suffix it is verified), and the output is the same either way."""
    rng = random.Random(13)
    prompt, after = rng.choices(range(48), k=30), rng.choices(range(48), k=20)
    first = plain_greedy(target, prompt, 1)
    pol = policy(4, lookup=True, n=8)
    for suffix in (tuple(after), ()):
        engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
        engine.history.see_prompt(prompt + first + after)
        final = list(engine.generate(CompletionRequest("r", tuple(prompt), pol, suffix_ids=suffix)))[-1]
        assert list(final.token_ids) == plain_greedy(target, prompt, 8)
        assert ("pool" in final.stats.drafters) == (not suffix)


def test_a_free_draft_is_verified_no_further_than_the_stop_rule_lets_the_answer_run(target):
    """A line's answer ends at its newline: the pool's copy that runs on past it is cut
    after the newline's token, so the round verifies no rows the answer could never show."""
    rng = random.Random(17)
    prompt = rng.choices(range(36), k=30)  # letters and digits: no newline in the prompt
    first = plain_greedy(target, prompt, 1)
    newline = CharTokenizer.alphabet.index("\n")
    engine = SpeculativeEngine(target, None, CharTokenizer(), stop_ids=[])
    engine.history.see_prompt(prompt + first + [5, newline, 6, 7, 8, 9, 10])
    asked = replace(policy(4, lookup=True, n=12), stop=StopRule("line"))
    final = list(engine.generate(CompletionRequest("r", tuple(prompt), asked)))[-1]
    assert final.stats.k_trace[0] == 2  # [5, newline], not the 7 tokens the pool holds
    assert list(final.token_ids) == plain_greedy(target, prompt, len(final.token_ids))


def test_a_warm_draft_left_behind_by_the_pool_is_judged_on_what_it_lacks_since(target):
    """After a warm the draft lacks nothing (it drafted after the answer's first token at
    rest); the pool then settles 16 tokens in one round, and that lack is the mid-answer
    rule's to price (costs.catch_up_pays): far dearer than the rest saves, the
    draft never catches up."""
    from lsp_server.engine.costs import RowCosts

    engine = SpeculativeEngine(target, tiny_model(seed=2), CharTokenizer(), stop_ids=[])
    prompt = random.Random(19).choices(range(48), k=30)
    answer = plain_greedy(target, prompt, 24)
    pol = policy(4, mode="adaptive", lookup=True, n=24)
    list(engine.generate(CompletionRequest("w", tuple(prompt), replace(pol, max_new_tokens=0))))
    engine.history.see_prompt(prompt + answer[:16])
    engine.costs = RowCosts(target=(1.0,) * 6, draft=0.01, draft_prefill=10.0)
    final = run(engine, prompt, pol)
    assert final.stats.draft_catch_up == 0 and final.stats.drafters["pool"].accepted >= 15
    assert final.stats.catch_ups_skipped > 0 and "draft" not in final.stats.drafters
    assert list(final.token_ids) == answer


def test_the_draft_model_drafts_no_further_than_the_answer_would_end(target):
    """A line's answer ends at its newline: the draft model (here the target itself, so every
    token it drafts is right) stops drafting after the newline's token instead of drafting
    k tokens the answer could never show."""
    newline = CharTokenizer.alphabet.index("\n")
    prompt = random.Random(2).choices(range(48), k=30)
    greedy = plain_greedy(target, prompt, 24)
    end = greedy.index(newline)  # the 7th token
    assert end > 2
    engine = SpeculativeEngine(target, target, CharTokenizer(), stop_ids=[])
    final = run(engine, prompt, replace(policy(8, n=24), stop=StopRule("line")))
    tokens = list(final.token_ids)  # to the newline, and a round's own target token after it
    assert tokens == greedy[:len(tokens)] and end < len(tokens) <= end + 2
    assert final.stats.drafted == final.stats.accepted <= end + 1  # none drafted past it


def test_a_free_draft_wrong_at_its_first_token_is_rent_the_draft_model_catches_up_for(target):
    """The pool settles 14 tokens (the draft model, left behind by them, is not caught up
    unpriced), then copies text that goes wrong at its first token round after round: each
    such round settles one token, as a plain round does, so the model, priced again, catches
    up and drafts instead of the pool going on being wrong."""
    from lsp_server.engine.costs import RowCosts

    prompt = random.Random(29).choices(range(48), k=30)
    answer = plain_greedy(target, prompt, 30)
    engine = SpeculativeEngine(target, tiny_model(seed=2), CharTokenizer(), stop_ids=[])
    engine.history.see_prompt(prompt + answer[:14])
    for j in range(15, 30):  # after each 8-token tail of the answer, a wrong next token
        engine.history.see_prompt(answer[j - 8:j] + [(answer[j] + 1) % 48])
    engine.costs = RowCosts(target=(1.0,) * 6, draft=0.01, draft_prefill=0.001)
    final = run(engine, prompt, policy(4, mode="adaptive", lookup=True, n=30))
    assert list(final.token_ids) == answer
    assert final.stats.drafters["pool"].accepted >= 13 and final.stats.catch_ups_skipped > 0
    assert final.stats.drafters["draft"].rounds > 0
