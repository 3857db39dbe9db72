"""A warm drafts at rest: the draft model's tokens after the answer's first token are made
while the cursor rests, and the request's first round verifies them without a draft step.
Output stays the target's own; the tokens are metered (the warm's time, the request's
rounds); a request arriving meanwhile keeps what was drafted so far."""

from __future__ import annotations

from dataclasses import replace

import torch

from lsp_server.engine.drafters import AheadDrafter
from lsp_server.engine.sampling import Sampling
from lsp_server.engine.speculative import AHEAD_TOKENS
from lsp_server.engine.types import CompletionRequest
from tests.unit.test_engine_warm import POLICY, PROMPT, WARM, final, make_engine

torch.set_grad_enabled(False)


def test_a_warm_drafts_after_the_first_token_and_the_first_round_only_verifies():
    engine = make_engine()
    warm = final(engine.generate(CompletionRequest("w", PROMPT, WARM)))
    assert warm.reason == "warm" and warm.stats.ahead_tokens == min(AHEAD_TOKENS, POLICY.k_max)
    assert warm.stats.draft_s > 0  # the draft steps at rest, metered on the warm
    after = final(engine.generate(CompletionRequest("r", PROMPT, POLICY)))
    ahead = after.stats.drafters["ahead"]
    assert ahead.rounds >= 1 and ahead.drafted >= 1 and ahead.time_s < 0.01
    assert after.stats.k_trace[0] == ahead.drafted  # the first round: the first token came from the warm
    cold = final(make_engine().generate(CompletionRequest("c", PROMPT, POLICY)))
    assert after.token_ids == cold.token_ids  # lossless: the target's own greedy output


def test_the_tokens_drafted_at_rest_are_the_draft_models_greedy_ones_after_the_targets_first():
    engine = make_engine()
    final(engine.generate(CompletionRequest("w", PROMPT, WARM)))
    (context, made), = engine.ahead._held
    first = final(make_engine().generate(CompletionRequest("c", PROMPT, replace(POLICY, max_new_tokens=1))))
    assert context == PROMPT + first.token_ids
    fresh = make_engine().drafter
    fresh.begin(context)
    assert tuple(fresh.propose(context, POLICY.k_max, 0.0, Sampling(), None, lambda: False).tokens) == made


def test_a_request_arriving_during_the_draft_keeps_what_was_drafted():
    engine = make_engine()
    slots = engine.drafter.pool.slots

    def request_came() -> bool:  # polled between layers: once the draft has fed two tokens
        return any(len(slot.ids) >= len(PROMPT) + 2 for slot in slots)

    warm = final(engine.generate(CompletionRequest("w", PROMPT, WARM), request_came))
    assert warm.stats.ahead_tokens == 2 < POLICY.k_max
    after = final(engine.generate(CompletionRequest("r", PROMPT, POLICY)))
    cold = final(make_engine().generate(CompletionRequest("c", PROMPT, POLICY)))
    assert after.stats.drafters["ahead"].drafted <= warm.stats.ahead_tokens
    assert after.token_ids == cold.token_ids


def test_no_draft_at_rest_without_speculation_or_for_another_prompt():
    engine = make_engine()
    off = final(engine.generate(CompletionRequest("w", PROMPT, replace(WARM, mode="off"))))
    assert off.stats.ahead_tokens == 0 and not engine.ahead._held
    final(engine.generate(CompletionRequest("w2", PROMPT, WARM)))
    other = PROMPT[:-1] + (5,)
    done = final(engine.generate(CompletionRequest("r", other, POLICY)))
    assert "ahead" not in done.stats.drafters


def test_the_drafter_follows_a_round_that_accepted_part_of_its_tokens():
    ahead = AheadDrafter(held=2)
    ahead.keep([1, 2, 3], [4, 5, 6, 7])
    assert ahead.propose([1, 2, 3], 3).tokens == [4, 5, 6]
    assert ahead.propose([1, 2, 3, 4, 5], 8).tokens == [6, 7]
    assert ahead.propose([1, 2, 3, 4, 9], 8).tokens == []  # the target said otherwise
    assert ahead.propose([1, 2, 3, 4, 5, 6, 7], 8).tokens == []  # all used
    assert ahead.propose([0, 2, 3], 8).tokens == []
    ahead.keep([1, 2, 3], [8])  # the same context drafted again replaces the old
    ahead.keep([4], [1])
    ahead.keep([5], [1])  # the oldest goes
    assert ahead.propose([1, 2, 3], 8).tokens == [] and ahead.propose([5], 8).tokens == [1]
