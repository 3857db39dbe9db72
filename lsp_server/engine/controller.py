"""Per-round decisions: how many tokens to draft (k), and when to stop speculating.

Inputs are the request's `DraftPolicy` (from the cursor's syntax context), live evidence
from this request (accepted per round, the target's entropy), and acceptance remembered
per context across requests. k = 0 means a plain decoding round.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass, field

from .costs import Odds, RowCosts, best_k
from .types import DraftPolicy

ENTROPY_EMA = 0.5  # weight of the newest round's mean target entropy
# The request's acceptance so far is blended with a prior worth this many verified draft
# positions (the context's remembered rate, else PRIOR_ACCEPTANCE) before the cost model
# uses it.
PRIOR_TOKENS = 8
PRIOR_ACCEPTANCE = 0.8
# The same for a free draft (prompt lookup, the pool), per source: right less often than the
# model (130 of 279 lookup tokens in one `bench engine` run), but costing no draft step.
FREE_PRIOR_ODDS = Odds(0.6, 0.6)
# Generated lengths remembered per context: what the next answer there will likely need.
LENGTHS_KEPT = 16


@dataclass
class ContextMemory:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    # The draft model's rounds alone, for the cost model (prompt lookup's guesses cost no
    # draft steps, and theirs are right less often: 130 of 279 against the model's 394 of
    # 501 in one `bench engine` run): accepted tokens, and rounds cut at a rejected token.
    model_accepted: int = 0
    model_rejected: int = 0
    # Free drafts per source (draft_choice.price_key)
    free: dict[str, "FreeRecord"] = field(default_factory=dict)

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0


def position_acceptance(accepted: int, rejected: int) -> float | None:
    """How often the draft is right at a position the verify looked at: accepted / (accepted
    + rejected), None before any. This, not accepted / drafted, is the `a` of the cost
    model's geometric run (costs.expected_tokens): the tokens after a round's first rejection
    are never judged, and counting them as misses pulled `a` down. In one `bench engine`
    run (40 HumanEval prompts, native kernels, Intel Xeon) accepted / drafted was 0.71
    while the draft was right at 0.89 of the target's positions (`bench bound`), so the
    cost model drafted less, and on fewer requests, than paid."""
    seen = accepted + rejected
    return accepted / seen if seen else None


@dataclass
class FreeRecord:
    """A free source's verified positions (costs.Odds): its first token, and those after a
    token it got right; the positions after a rejection were never judged."""

    first_hit: int = 0
    first_miss: int = 0
    later_hit: int = 0
    later_miss: int = 0

    def add(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.first_hit += accepted > 0
        self.first_miss += accepted == 0
        self.later_hit += max(0, accepted - 1)
        self.later_miss += 0 < accepted < drafted

    @property
    def position_acceptance(self) -> float | None:
        return position_acceptance(self.first_hit + self.later_hit, self.first_miss + self.later_miss)

    def odds(self, prior: Odds, weight: float) -> Odds:
        """These records pulled towards `prior`, worth `weight` judged positions of each kind."""
        return Odds((self.first_hit + weight * prior.first) / (self.first_hit + self.first_miss + weight),
                    (self.later_hit + weight * prior.later) / (self.later_hit + self.later_miss + weight))

    def measured(self, default: Odds, least: int) -> Odds:
        """Each rate as recorded once it has `least` judged positions, else `default`'s."""
        first, later = self.first_hit + self.first_miss, self.later_hit + self.later_miss
        return Odds(self.first_hit / first if first >= least else default.first,
                    self.later_hit / later if later >= least else default.later)


@dataclass
class AcceptanceMemory:
    """Acceptance per syntax context and stop kind (memory_key), kept across requests (thread-safe: read by the server)."""

    by_context: dict[str, ContextMemory] = field(default_factory=dict)
    lengths: dict[str, deque] = field(default_factory=dict)  # generated tokens of recent requests
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_length(self, key: str, generated: int) -> None:
        """One answer's length under `key` (memory_key: its context and stop rule)."""
        with self.lock:
            self.lengths.setdefault(key, deque(maxlen=LENGTHS_KEPT)).append(generated)

    def typical_length(self, key: str) -> float | None:
        """The median length of this key's recent answers; None before any."""
        with self.lock:
            kept = self.lengths.get(key)
            return statistics.median(kept) if kept else None

    def remaining(self, key: str, generated: int) -> float | None:
        """How many more tokens an answer that has `generated` will likely take: the mean
        rest of this key's recent answers that were longer; None when none was (no guess)."""
        with self.lock:
            rest = [n - generated for n in self.lengths.get(key, ()) if n > generated]
        return statistics.fmean(rest) if rest else None

    def record(self, key: str, drafted: int, accepted: int, model: bool = True,
               source: str = "") -> None:
        """One round's proposal (`model`: the draft model's, else the free `source`'s)."""
        with self.lock:
            m = self.by_context.setdefault(key, ContextMemory())
            m.rounds += 1
            m.drafted += drafted
            m.accepted += accepted
            if model:
                m.model_accepted += accepted
                m.model_rejected += accepted < drafted
            elif source:
                m.free.setdefault(source, FreeRecord()).add(drafted, accepted)

    def free_prior(self, key: str, source: str, default: Odds = FREE_PRIOR_ODDS) -> Odds:
        """A free source's odds in this context, each once it has PRIOR_TOKENS judged
        positions, else `default`'s."""
        with self.lock:
            m = self.by_context.get(key)
            record = m.free.get(source) if m else None
            return default if record is None else record.measured(default, PRIOR_TOKENS)

    def suggested_k(self, policy: DraftPolicy, min_rounds: int = 8) -> int:
        """Start where this context's past rounds say the draft is usually right."""
        with self.lock:
            m = self.by_context.get(memory_key(policy))
            if m is None or m.rounds < min_rounds:
                return policy.k_init
            return clamp(round(m.mean_accepted) + 1, policy.k_min, policy.k_max)

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            return {
                c: {"rounds": m.rounds, "drafted": m.drafted, "accepted": m.accepted,
                    "mean_accepted_per_round": m.mean_accepted,
                    "acceptance_rate": m.accepted / m.drafted if m.drafted else 0.0,
                    "model_positions": m.model_accepted + m.model_rejected,
                    "model_position_acceptance": position_acceptance(m.model_accepted, m.model_rejected),
                    "free_position_acceptance": {
                        source: seen.position_acceptance for source, seen in m.free.items()},
                    "free_records": {source: vars(seen).copy() for source, seen in m.free.items()}}
                for c, m in self.by_context.items()
            }


def memory_key(policy: DraftPolicy) -> str:
    """What answer lengths and acceptance are remembered under: the context and where the
    answer stops (a mid-line cursor's line ends it; a line start's statement or block runs
    on). Acceptance too, because a line's first tokens are the hard ones: in three `bench
    speculation` runs (AMD EPYC Zen 4, 2026-12-07) the draft model was right at 0.50-0.71 of
    its tokens at mid-line spots and 0.80-0.81 at line starts (where it drafted enough to
    tell), and keyed by the context alone the lines' record (6 of 11) priced the blocks'
    rounds below paying: three simple_body blocks decoded without the model (1.06-1.61x)."""
    return f"{policy.context}/{policy.stop.kind}"


def clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, x))


class Controller:
    def __init__(self, policy: DraftPolicy, memory: AcceptanceMemory | None = None,
                 costs: RowCosts | None = None):
        self.policy = policy
        self.memory = memory
        self.costs = costs if policy.mode == "adaptive" else None
        adaptive = policy.mode == "adaptive"
        self.k = memory.suggested_k(policy) if (memory and adaptive) else policy.k_init
        self.plain = policy.mode == "off" or policy.k_max <= 0
        self.entropy_ema: float | None = None
        self.model_accepted = self.model_rejected = 0
        self.key = memory_key(policy)  # what this request's rounds are remembered under
        prior = memory.snapshot().get(self.key) if memory is not None else None
        seen = prior["model_positions"] if prior else 0
        self.prior = prior["model_position_acceptance"] if seen >= PRIOR_TOKENS else PRIOR_ACCEPTANCE
        self.free_seen: dict[str, FreeRecord] = {}  # this request's, per free source

    @property
    def entropy_switching(self) -> bool:
        return self.policy.mode == "adaptive" and self.policy.entropy_high > 0

    @property
    def acceptance(self) -> float:
        """How often this request's draft model is right at a verified position
        (position_acceptance), pulled towards the prior while evidence is thin: the `a` the
        cost model prices a round of the draft model at."""
        return ((self.model_accepted + PRIOR_TOKENS * self.prior)
                / (self.model_accepted + self.model_rejected + PRIOR_TOKENS))

    @property
    def speculates(self) -> bool:
        """Whether any draft may run: not in mode off or a context capped at k = 0. The
        entropy switch stops the model's drafts only; a free draft's length is priced by
        its own acceptance (free_acceptance)."""
        return self.policy.mode != "off" and self.policy.k_max > 0

    def free_acceptance(self, source: str, default: Odds = FREE_PRIOR_ODDS) -> Odds:
        """This free source's odds in this request, pulled towards the context's record of
        it (or the free prior)."""
        prior = self.memory.free_prior(self.key, source, default) if self.memory else default
        return self.free_seen.get(source, FreeRecord()).odds(prior, PRIOR_TOKENS)

    def next_k(self) -> int:
        """The heuristic's k, capped by the k that the measured round costs say pays most
        at this acceptance (0: a plain round beats any draft here)."""
        if self.plain:
            return 0
        if self.costs is None:
            return self.k
        return min(self.k, best_k(self.costs, self.acceptance, self.policy.k_max))

    def observe(self, drafted: int, accepted: int, target_entropy: float | None, model: bool = True,
                source: str = "") -> None:
        """Learn from one round: +2 when every drafted token was accepted, -1 after a
        rejection (the heuristic transformers calls "heuristic"), and entropy hysteresis.

        One exception: a proposal cut short by the confidence stop ends on the token the
        draft was unsure of, so when only that last token is rejected the stop did its job
        and k stays. Shrinking k there cuts the next confident run short (measured in
        `specfill bench policy`: +2/-1 alone lost to a fixed k of 8 with the stop).
        `model`: the draft model proposed it (else the free `source`): only its rounds price
        the cost model's acceptance, and only they move k (a free draft's length is the
        match's)."""
        p = self.policy
        if model:
            self.model_accepted += accepted
            self.model_rejected += accepted < drafted
        elif drafted and source:
            self.free_seen.setdefault(source, FreeRecord()).add(drafted, accepted)
        if drafted and self.memory is not None:
            self.memory.record(self.key, drafted, accepted, model, source)
        if drafted and model and p.mode == "adaptive":
            cut_short = p.draft_p_min > 0 and drafted < self.k
            if accepted == drafted:
                self.k = clamp(self.k + 2, p.k_min, p.k_max)
            elif not (cut_short and accepted == drafted - 1):
                self.k = clamp(self.k - 1, p.k_min, p.k_max)
        if target_entropy is not None and self.entropy_switching:
            e = self.entropy_ema
            self.entropy_ema = target_entropy if e is None else (
                ENTROPY_EMA * target_entropy + (1 - ENTROPY_EMA) * e)
            if not self.plain and self.entropy_ema > p.entropy_high:
                self.plain = True
            elif self.plain and p.mode != "off" and self.entropy_ema < p.entropy_low:
                self.plain = False
