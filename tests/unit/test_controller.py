"""The per-round k decisions: +2/-1, the confidence-stop exception, bounds, entropy hysteresis."""

from __future__ import annotations

import statistics

import pytest

from lsp_server.engine.controller import PRIOR_ACCEPTANCE, AcceptanceMemory, Controller, memory_key
from lsp_server.engine.types import DraftPolicy, StopRule


def policy(**kw) -> DraftPolicy:
    base = dict(context="test", k_init=4, k_min=1, k_max=8, max_new_tokens=64, stop=StopRule("none"),
                draft_p_min=0.5, mode="adaptive", entropy_high=0.0, entropy_low=0.0)
    return DraftPolicy(**{**base, **kw})


def test_full_acceptance_grows_k_by_two_and_a_rejection_shrinks_it_by_one() -> None:
    c = Controller(policy())
    c.observe(drafted=4, accepted=4, target_entropy=None)
    assert c.next_k() == 6
    c.observe(drafted=6, accepted=2, target_entropy=None)
    assert c.next_k() == 5


def test_a_confidence_cut_whose_unsure_last_token_is_rejected_keeps_k() -> None:
    c = Controller(policy())
    c.observe(drafted=3, accepted=2, target_entropy=None)  # cut at 3 of 4: only the last was wrong
    assert c.next_k() == 4
    c.observe(drafted=3, accepted=1, target_entropy=None)  # a confident token was wrong too
    assert c.next_k() == 3


def test_without_a_confidence_stop_every_rejection_shrinks_k() -> None:
    c = Controller(policy(draft_p_min=0.0))
    c.observe(drafted=3, accepted=2, target_entropy=None)
    assert c.next_k() == 3


def test_k_stays_within_the_policy_bounds_and_fixed_mode_never_moves() -> None:
    c = Controller(policy(k_init=7))
    c.observe(drafted=7, accepted=7, target_entropy=None)
    assert c.next_k() == 8
    low = Controller(policy(k_init=1))
    low.observe(drafted=1, accepted=0, target_entropy=None)
    assert low.next_k() == 1
    fixed = Controller(policy(mode="fixed"))
    fixed.observe(drafted=4, accepted=0, target_entropy=None)
    assert fixed.next_k() == 4


def test_high_entropy_switches_to_plain_rounds_and_back_with_hysteresis() -> None:
    c = Controller(policy(entropy_high=3.0, entropy_low=1.5))
    c.observe(drafted=4, accepted=1, target_entropy=4.0)
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=2.0)  # EMA 3.0: between the marks, stays plain
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=0.0)  # EMA 1.5 is not below the low mark
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=0.0)  # EMA 0.75
    assert c.next_k() > 0


def test_acceptance_memory_suggests_a_starting_k_after_enough_rounds() -> None:
    memory = AcceptanceMemory()
    p = policy()
    assert memory.suggested_k(p) == 4
    for _ in range(8):
        memory.record(memory_key(p), drafted=6, accepted=5)
    assert memory.suggested_k(p) == 6


def test_measured_round_costs_cap_k_where_longer_drafts_stop_paying() -> None:
    from lsp_server.engine.costs import RowCosts

    # A flat verify up to 5 rows, twice the cost from 6, and a draft step at 0.3 of a step.
    costs = RowCosts(target=(1.0, 1.05, 1.1, 1.15, 1.2, 2.4, 2.5, 2.6, 2.7), draft=0.3)
    c = Controller(policy(k_init=8, k_max=8), costs=costs)
    assert c.next_k() == 3  # at the prior acceptance (0.8) a 5th draft step no longer pays
    for _ in range(30):  # each round judges one position (the first), and it is wrong
        c.observe(drafted=4, accepted=0, target_entropy=None)  # the draft is always wrong here
    assert c.next_k() == 0  # a plain round beats any draft at this acceptance
    fixed = Controller(policy(mode="fixed", k_init=8, k_min=8, k_max=8), costs=costs)
    assert fixed.next_k() == 8  # fixed mode means what it says


def test_best_k_maximises_expected_tokens_per_second() -> None:
    from lsp_server.engine.costs import RowCosts, best_k, expected_tokens, predicted_speedup

    flat = RowCosts(target=(1.0,) * 13, draft=0.1)
    assert expected_tokens(3, 0.5) == 1 + 0.5 + 0.25 + 0.125
    assert best_k(flat, 0.99) == 12 and best_k(flat, 0.0) == 0
    assert predicted_speedup(flat, 0, 0.9) == 1.0
    assert predicted_speedup(flat, 4, 0.9) == expected_tokens(4, 0.9) / 1.4


def test_drafting_pays_only_when_its_rounds_save_more_than_the_drafts_catch_up() -> None:
    from lsp_server.engine.costs import RowCosts, draft_pays, expected_tokens

    # one-row feed 1.0, two rows 1.1, a draft step 0.2, a draft catch-up token 0.01
    costs = RowCosts(target=(1.0, 1.1, 1.2), draft=0.2, draft_prefill=0.01)
    per_token = (1.1 + 0.2) / expected_tokens(1, 0.8)  # k = 1 is best at 0.8 here
    saved = 1.0 - per_token  # a round of k = 1 saves this much a token
    catch_up = 500  # 5 s of draft prefill
    assert not draft_pays(costs, 0.8, catch_up, tokens=5.0 / saved - 1, k_max=1)
    assert draft_pays(costs, 0.8, catch_up, tokens=5.0 / saved + 1, k_max=1)
    assert draft_pays(costs, 0.8, 0, tokens=1, k_max=1)  # a warm draft cache: any saving pays
    assert not draft_pays(costs, 0.0, 0, tokens=1000)  # a draft that is never right never pays
    assert draft_pays(RowCosts(target=(1.0, 1.1), draft=0.2), 0.8, catch_up, 1)  # unmeasured catch-up


def test_a_draft_behind_mid_answer_catches_up_after_a_plain_round_where_the_rest_repays_it() -> None:
    from lsp_server.engine.costs import CATCH_UP_ROWS, RowCosts, catch_up_pays, expected_tokens

    costs = RowCosts(target=(1.0, 1.1, 1.2), draft=0.2, draft_prefill=0.1)
    saved = 1.0 - (1.1 + 0.2) / expected_tokens(1, 0.8)  # a token, at k = 1
    # one feed's worth of tokens is not priced
    assert catch_up_pays(costs, 0.8, CATCH_UP_ROWS, rest=0, rented=0, k_max=1)
    missing = 40  # 4.0 s
    # more waits for one plain round, however long the answer is guessed to run on
    assert not catch_up_pays(costs, 0.8, missing, rest=1000, rented=0, k_max=1)
    assert catch_up_pays(costs, 0.8, missing, rest=4.0 / saved + 1, rented=1, k_max=1)
    assert not catch_up_pays(costs, 0.8, missing, rest=4.0 / saved - 1, rented=1, k_max=1)
    # no guess of the rest: once the plain rounds decoded without it cost what it saves
    assert not catch_up_pays(costs, 0.8, missing, rest=None, rented=int(4.0 / saved) - 1, k_max=1)
    assert catch_up_pays(costs, 0.8, missing, rest=None, rented=int(4.0 / saved) + 1, k_max=1)


def test_live_costs_replace_the_load_timings_row_count_by_row_count() -> None:
    from lsp_server.engine.costs import LIVE_MIN, PREFILL_ROWS, LiveCosts, RowCosts

    measured = RowCosts(target=(0.038, 0.037, 0.064), draft=0.015, draft_prefill=0.004)
    live = LiveCosts(measured)
    assert live.current == measured
    for seconds in [0.030] * (LIVE_MIN - 1) + [0.300]:  # one round preempted by another process
        live.observe_feed(1, seconds)
    assert live.current.target[0] == 0.030
    # rows with no live timings of their own are scaled as the live feeds ran from theirs
    assert live.current.target[1:] == pytest.approx([t * 0.030 / 0.038 for t in measured.target[1:]])
    for _ in range(LIVE_MIN):
        live.observe_feed(2, 0.037)
    assert live.current.target[1] == 0.037
    live.observe_feed(9, 1.0)  # beyond the rows timed at load: ignored
    assert len(live.current.target) == 3
    # an untimed draft is scaled as the feeds ran from their load timings
    scale = statistics.median([0.030 / 0.038] * (LIVE_MIN - 1) + [0.300 / 0.038] + [1.0] * LIVE_MIN)
    assert live.current.draft == pytest.approx(measured.draft * scale)
    assert live.current.draft_prefill == pytest.approx(measured.draft_prefill * scale)
    for _ in range(LIVE_MIN):
        live.observe_draft(4, 0.048)
    assert live.current.draft == pytest.approx(0.012)
    live.observe_catch_up(PREFILL_ROWS - 1, 1.0)  # a short feed costs more a token: not counted
    assert live.current.draft_prefill == pytest.approx(measured.draft_prefill * scale)
    live.observe_catch_up(400, 2.0)
    assert live.current.draft_prefill == 0.005


def test_a_draft_timed_slow_at_load_is_scaled_with_the_live_feeds_so_drafting_can_resume() -> None:
    from dataclasses import replace

    from lsp_server.engine.costs import LIVE_MIN, LiveCosts, RowCosts, best_k

    # load timings twice the live ones, as in a bench engine run on an Intel Xeon
    measured = RowCosts(target=(0.109, 0.113, 0.150, 0.168, 0.123), draft=0.047)
    live = LiveCosts(measured)
    for _ in range(LIVE_MIN):  # plain steps and one-token verifies: the draft is not timed
        live.observe_feed(1, 0.055)
        live.observe_feed(2, 0.057)
    scale = statistics.median([0.055 / 0.109, 0.057 / 0.113] * LIVE_MIN)
    assert live.current.draft == pytest.approx(0.047 * scale)
    assert best_k(live.current, 0.8) > 0
    # the load's draft timing beside the live feeds would have kept drafting off
    assert best_k(replace(live.current, draft=measured.draft), 0.8) == 0


def test_acceptance_memory_keeps_the_median_of_recent_answer_lengths_per_context() -> None:
    from lsp_server.engine.controller import LENGTHS_KEPT

    memory = AcceptanceMemory()
    assert memory.typical_length("test") is None
    for n in (10, 40, 12):
        memory.record_length("test", n)
    assert memory.typical_length("test") == 12 and memory.typical_length("other") is None
    for _ in range(LENGTHS_KEPT):
        memory.record_length("test", 100)
    assert memory.typical_length("test") == 100  # only the newest are kept


def test_an_answers_likely_rest_is_the_mean_rest_of_the_recent_answers_that_ran_longer() -> None:
    memory = AcceptanceMemory()
    assert memory.remaining("c/line", 0) is None  # no answers yet: no guess
    for n in (6, 6, 9, 30):
        memory.record_length("c/line", n)
    assert memory.remaining("c/line", 1) == (5 + 5 + 8 + 29) / 4
    assert memory.remaining("c/line", 10) == 20
    assert memory.remaining("c/line", 30) is None  # longer than all of them: no guess
    assert memory.remaining("c/block", 1) is None  # another stop rule, another record


def test_acceptance_counts_the_positions_the_verify_judged_not_the_tokens_after_a_rejection() -> None:
    from lsp_server.engine.controller import PRIOR_TOKENS, position_acceptance

    # A draft right at each position with probability a, cut at its first miss: of 4 drafted,
    # 2 accepted means 3 positions judged (2 right, 1 wrong); the 4th was never looked at.
    assert position_acceptance(2, 1) == 2 / 3 and position_acceptance(0, 0) is None
    c = Controller(policy(k_init=4, k_max=4))
    for _ in range(200):
        c.observe(drafted=4, accepted=2, target_entropy=None)
        c.observe(drafted=4, accepted=4, target_entropy=None)  # all right: nothing rejected
    assert c.acceptance == pytest.approx((1200 + PRIOR_TOKENS * 0.8) / (1200 + 200 + PRIOR_TOKENS))
    memory = AcceptanceMemory()
    for _ in range(PRIOR_TOKENS):
        memory.record(memory_key(policy()), drafted=4, accepted=1)
    assert memory.snapshot()[memory_key(policy())]["acceptance_rate"] == 0.25  # the metered share stays as it was
    assert Controller(policy(), memory).prior == 0.5  # the next request starts from 1 right in 2 judged


def test_prompt_lookups_guesses_do_not_price_the_draft_models_rounds() -> None:
    memory = AcceptanceMemory()
    c = Controller(policy(k_init=4, k_max=4), memory)
    for _ in range(20):
        c.observe(drafted=4, accepted=4, target_entropy=None)  # the model: always right
        c.observe(drafted=6, accepted=0, target_entropy=None, model=False)  # lookup: always wrong
    from lsp_server.engine.controller import PRIOR_ACCEPTANCE, PRIOR_TOKENS

    # the model's 80 right of 80 judged, blended with the prior; lookup's misses left out
    assert c.acceptance == pytest.approx((80 + PRIOR_TOKENS * PRIOR_ACCEPTANCE) / (80 + PRIOR_TOKENS))
    snapshot = memory.snapshot()[memory_key(policy())]
    assert (snapshot["drafted"], snapshot["accepted"]) == (200, 80)  # both metered
    assert snapshot["model_position_acceptance"] == 1.0 and snapshot["model_positions"] == 80


def test_a_warm_token_is_both_models_prefill_and_follows_the_live_prefills() -> None:
    from lsp_server.engine.costs import PREFILL_ROWS, LiveCosts, RowCosts

    assert RowCosts(target=(0.03,), draft=0.01, draft_prefill=0.002).warm_token == 0.0  # not timed
    live = LiveCosts(RowCosts(target=(0.03,), draft=0.01, draft_prefill=0.002, prefill=0.006))
    assert live.current.warm_token == pytest.approx(0.008)
    live.observe_prefill(PREFILL_ROWS - 1, 1.0)  # a short feed: not counted
    assert live.current.prefill == 0.006
    live.observe_prefill(320, 3.2)
    assert live.current.warm_token == pytest.approx(0.012)


def test_a_lines_record_does_not_price_the_rounds_of_an_answer_that_runs_on() -> None:
    # Mid-line answers (the line ends them) begin with the hard tokens; a line start's
    # statement or block runs on where the draft is right more often: kept apart.
    memory = AcceptanceMemory()
    line, block = policy(stop=StopRule("line")), policy(stop=StopRule("block"))
    for _ in range(8):
        Controller(line, memory).observe(drafted=2, accepted=0, target_entropy=None)
    assert Controller(line, memory).prior == 0.0
    assert Controller(block, memory).prior == PRIOR_ACCEPTANCE
    assert set(memory.snapshot()) == {memory_key(line)}


def test_the_costs_rounds_are_priced_at_are_reported_in_milliseconds() -> None:
    from lsp_server.engine.costs import RowCosts

    shown = RowCosts(target=(0.03, 0.0312), draft=0.009, draft_prefill=0.0025, prefill=0.004).to_json()
    assert shown == {"target_feed_ms_by_rows": [30.0, 31.2], "draft_step_ms": 9.0,
                     "draft_catch_up_ms_a_token": 2.5, "prefill_ms_a_token": 4.0}
