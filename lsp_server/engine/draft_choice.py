"""Which draft a round verifies: a free one (prompt lookup, the pool of earlier requests, the
draft model's tokens made at rest) or the draft model's, by the tokens per second each is
expected to give.

A free draft costs no draft step, only the verify's extra rows, so it may run longer than
any k the model drafts; its length is cut where one more token stops paying at its source's
odds (costs.free_length). The draft model's round is priced as the controller prices
it (costs.tokens_per_s at its k); a plain round as one target step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .controller import Controller
from .costs import Odds, free_length, tokens_per_s
from .drafters import AheadDrafter, Draft

# A free draft after a match this long is priced apart from one after a shorter match: a
# long match names its context, a short one (a name, a bracket) often continues elsewhere.
# Prompt lookup matches n-grams of at most 4 tokens (drafters.PromptLookupDrafter), so a
# whole 4-gram is its long match.
LONG_MATCH = {"pool": 8, "lookup": 4}
# A free draft's odds (costs.Odds) before its context has a record (Controller.
# free_acceptance), by source and match (price_key), first token / after a right one.
# The pool after long matches: what two `bench speculation` runs recorded (AMD EPYC Zen 4,
# 2026-12-07), 59/63 / 456/471; after short matches it was right at none of its positions
# in two earlier runs (a short tail of another file, a name or a bracket, continues
# elsewhere), and a shared prior of 0.6 for short matches had every line's first round
# verify up to 8 rows of such drafts (lines 0.93x off / adaptive). Prompt lookup, from every
# round of 24 held-out spots (seed 2, AMD EPYC Zen 4, 2026-12-07, the server's debug log):
# after a 4-gram 95/120 / 54/63, after 2 or 3 tokens 48/85 / 22/32. One prior of 0.75 / 0.78
# for both drafted 4-5 tokens a round at line spots, right at 13 of 54 of them (lines 0.73x
# off / adaptive in a 12-spot run, seed 1).
FREE_PRIOR = {"pool_long": Odds(0.93, 0.97), "pool_short": Odds(0.1, 0.9),
              "lookup_long": Odds(0.8, 0.86), "lookup_short": Odds(0.55, 0.7)}

# Leading tokens a free draft must share with the text after the cursor to be taken for it:
# one or two ("\n", an indent) begin many a right answer too.
SUFFIX_PROBE = 3


def rewrites_suffix(tokens: Sequence[int], suffix_ids: Sequence[int]) -> bool:
    """Whether a free draft begins with the text that follows the cursor. The pool holds the
    document as earlier prompts showed it, where the text before the cursor runs straight
    into the text after it, so a long match on what was just typed continues with the
    suffix: an insertion written as what already follows it, which the target rejects (it
    ends the middle instead). Why: at the first line spot of `bench speculation` (AMD EPYC
    Zen 4) the first round verified 13-15 such pool tokens after a 47-token match, none
    right, and the answer came 0.6x as fast as without speculation."""
    n = SUFFIX_PROBE
    return len(tokens) >= n and len(suffix_ids) >= n and tuple(tokens[:n]) == tuple(suffix_ids[:n])


@dataclass(frozen=True)
class Offer:
    """A free draft and how long a tail of the context it matched."""

    draft: Draft
    match: int


def price_key(source: str, match: int) -> str:
    """What a free draft's acceptance is learnt and priced under (Controller.free_acceptance);
    the draft model's tokens made at rest (drafters.AheadDrafter) under the model's."""
    if source not in LONG_MATCH:
        return source
    return f"{source}_{'long' if match >= LONG_MATCH.get(source, LONG_MATCH['pool']) else 'short'}"


def pick_free(offers: Sequence[Offer], controller: Controller, model_k: int, *,
              min_match: int, trusted: set[str]) -> Draft | None:
    """The free draft to verify this round, or None: let the model draft (model_k > 0) or
    decode plainly. Without measured costs (a fixed k, tests): the longest match, and with
    the model at hand only a match of `min_match` tokens from a `trusted` source."""
    offers = [o for o in offers if o.draft.tokens]
    if not offers:
        return None
    if controller.costs is None:
        if model_k > 0:  # the model's own tokens made at rest, or a long match from a trusted source
            offers = [o for o in offers if o.draft.source == AheadDrafter.name
                      or o.match >= min_match and o.draft.source in trusted]
        longest = max(offers, key=lambda o: o.match) if offers else None
        return None if longest is None else Draft(longest.draft.source, longest.draft.tokens,
                                                  match=longest.match)
    costs = controller.costs
    other = tokens_per_s(costs, model_k, controller.acceptance) if model_k > 0 else 0.0
    best, best_rate = None, max(other, tokens_per_s(costs, 0, 1.0))
    for offer in offers:
        key = price_key(offer.draft.source, offer.match)
        # made at rest by the draft model: right as often as its rounds are
        odds = (controller.free_acceptance(key, FREE_PRIOR[key]) if key in FREE_PRIOR
                else Odds(controller.acceptance, controller.acceptance))
        keep, rate = free_length(costs, len(offer.draft.tokens), odds)
        if keep and rate > best_rate:
            best, best_rate = Draft(offer.draft.source, offer.draft.tokens[:keep], match=offer.match), rate
    return best
