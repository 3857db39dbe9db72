"""Per round: a free draft (lookup, the pool), the draft model, or a plain step, by the
tokens per second each is expected to give at the measured costs."""

from __future__ import annotations

from lsp_server.engine.controller import AcceptanceMemory, Controller
from lsp_server.engine.costs import Odds, RowCosts, free_expected, free_length, verify_s
from lsp_server.engine.draft_choice import Offer, pick_free, rewrites_suffix
from lsp_server.engine.drafters import Draft
from lsp_server.engine.types import DraftPolicy

FLAT = RowCosts(target=(1.0, 1.05, 1.1, 1.15, 1.2), draft=0.3)


def controller(costs=FLAT, mode="adaptive") -> Controller:
    return Controller(DraftPolicy(context="c", mode=mode), AcceptanceMemory(), costs)


def offer(source: str, n: int, match: int = 8) -> Offer:
    return Offer(Draft(source, list(range(n))), match)


def test_verify_cost_carries_the_timed_slope_past_the_rows_timed():
    assert verify_s(FLAT, 5) == 1.2
    assert abs(verify_s(FLAT, 9) - 1.4) < 1e-9


def test_a_free_draft_is_cut_where_one_more_token_stops_paying():
    assert free_length(FLAT, 12, Odds(0.95, 0.95))[0] == 12  # right almost always: verify it all
    assert free_length(FLAT, 12, Odds(0.02, 0.02))[0] == 0  # almost never: a plain step is better


def test_a_copy_that_runs_on_once_right_is_verified_further_than_one_rate_allows():
    """The same chance at the first token; a copy whose next tokens follow once it is right
    is worth more rows than a geometric run at that chance."""
    steep = RowCosts(target=(1.0, 1.2, 1.4, 1.6, 1.8), draft=0.3)
    geometric = free_length(steep, 12, Odds(0.7, 0.7))[0]
    runs_on = free_length(steep, 12, Odds(0.7, 0.97))[0]
    assert runs_on > geometric
    assert free_expected(0, Odds(0.7, 0.97)) == 1.0
    assert abs(free_expected(2, Odds(0.5, 0.8)) - (1 + 0.5 * 1.8)) < 1e-12


def test_a_free_draft_beats_the_model_and_runs_long_after_a_long_match_or_a_good_record():
    c = controller()
    short = [offer("lookup", 10, match=3), offer("pool", 3, match=5)]
    picked = pick_free(short, c, model_k=4, min_match=3, trusted=set())
    assert picked is not None and picked.source == "lookup"
    assert 3 <= len(picked.tokens) < 10  # at lookup's prior the tenth row does not pay
    long = pick_free([offer("pool", 10, match=20)], c, model_k=4, min_match=3, trusted=set())
    assert len(long.tokens) == 10  # at the long-match prior of 0.9 it does
    for _ in range(3):
        c.observe(drafted=10, accepted=10, target_entropy=None, model=False, source="lookup_short")
    assert len(pick_free(short, c, model_k=4, min_match=3, trusted=set()).tokens) == 10


def test_a_short_pool_match_waits_for_a_record_before_it_is_verified():
    """Another file's short tail (a name, a bracket) rarely continues the same way here:
    priced at its prior, it gives way to the model, and a record of hits brings it back."""
    c = controller()
    short_pool = [offer("pool", 8, match=5)]
    assert pick_free(short_pool, c, model_k=4, min_match=3, trusted={"pool"}) is None
    for _ in range(3):
        c.observe(drafted=8, accepted=8, target_entropy=None, model=False, source="pool_short")
    assert len(pick_free(short_pool, c, model_k=4, min_match=3, trusted={"pool"}).tokens) == 8


def test_a_free_source_that_keeps_missing_gives_way_to_the_model():
    c = controller()
    for _ in range(10):
        c.observe(drafted=8, accepted=0, target_entropy=None, model=False, source="pool_long")
    assert c.free_acceptance("pool_long").first < 0.2
    assert pick_free([offer("pool", 10)], c, model_k=4, min_match=3, trusted={"pool"}) is None
    # and it is remembered for the context's next request
    assert controller_with(c.memory).free_acceptance("pool_long").first < 0.2


def test_a_round_records_its_first_token_apart_from_the_run_after_it():
    c = controller()
    c.observe(drafted=8, accepted=0, target_entropy=None, model=False, source="lookup_short")
    c.observe(drafted=8, accepted=8, target_entropy=None, model=False, source="lookup_short")
    c.observe(drafted=8, accepted=3, target_entropy=None, model=False, source="lookup_short")
    record = c.memory.snapshot()[c.key]["free_records"]["lookup_short"]
    assert record == {"first_hit": 2, "first_miss": 1, "later_hit": 9, "later_miss": 1}


def controller_with(memory: AcceptanceMemory) -> Controller:
    return Controller(DraftPolicy(context="c"), memory, FLAT)


def test_without_costs_the_longest_trusted_match_goes_first():
    c = controller(costs=None, mode="fixed")
    offers = [offer("lookup", 4, match=3), offer("pool", 6, match=9)]
    assert pick_free(offers, c, model_k=4, min_match=3, trusted={"lookup", "pool"}).source == "pool"
    assert pick_free(offers, c, model_k=4, min_match=3, trusted={"lookup"}).source == "lookup"
    assert pick_free([offer("lookup", 4, match=2)], c, model_k=4, min_match=3, trusted={"lookup"}) is None
    assert pick_free([offer("lookup", 4, match=2)], c, model_k=0, min_match=3, trusted=set()) is not None


def test_a_free_draft_that_begins_with_the_text_after_the_cursor_is_known_for_it():
    suffix = (10, 11, 12, 13)
    assert rewrites_suffix([10, 11, 12], suffix) and rewrites_suffix([10, 11, 12, 99], suffix)
    # a newline and an indent begin many a right answer: three tokens must agree
    assert not rewrites_suffix([10, 11], suffix) and not rewrites_suffix([10, 11, 99, 13], suffix)
    assert not rewrites_suffix([10, 11, 12], ()) and not rewrites_suffix([10, 11, 12], (10, 11))


def test_a_whole_lookup_4_gram_is_a_long_match_and_the_pool_needs_8():
    from lsp_server.engine.draft_choice import price_key

    assert (price_key("lookup", 3), price_key("lookup", 4)) == ("lookup_short", "lookup_long")
    assert (price_key("pool", 7), price_key("pool", 8)) == ("pool_short", "pool_long")


def test_the_models_tokens_made_at_rest_are_priced_at_the_models_acceptance_and_beat_its_round():
    """They cost no draft step, so at the model's own odds they beat the round it would
    draft, and they run longer the more often the model is right."""
    steep = RowCosts(target=(1.0, 1.2, 1.4, 1.6, 1.8), draft=0.3)
    c = controller(steep)
    ahead = [offer("ahead", 8, match=0)]
    picked = pick_free(ahead, c, model_k=2, min_match=3, trusted=set())
    assert picked is not None and picked.source == "ahead"
    at_prior = len(picked.tokens)
    for _ in range(6):
        c.observe(drafted=4, accepted=4, target_entropy=None, model=True)
    assert len(pick_free(ahead, c, model_k=2, min_match=3, trusted=set()).tokens) > at_prior
    for _ in range(100):
        c.observe(drafted=4, accepted=0, target_entropy=None, model=True)
    assert c.acceptance < 0.25  # a 2-row verify for 1.23 tokens at best: one token at most
    assert len(pick_free(ahead, c, model_k=2, min_match=3, trusted=set()).tokens) == 1
    flat_out = controller(RowCosts(target=(1.0, 1.3, 1.6, 1.9, 2.2), draft=0.3))
    for _ in range(100):
        flat_out.observe(drafted=4, accepted=0, target_entropy=None, model=True)
    assert pick_free(ahead, flat_out, model_k=2, min_match=3, trusted=set()) is None  # a plain round
    fixed = controller(costs=None, mode="fixed")  # no costs: the model's own tokens, as drafted
    assert pick_free(ahead, fixed, model_k=3, min_match=3, trusted=set()).tokens == list(range(8))
