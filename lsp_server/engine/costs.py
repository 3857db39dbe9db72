"""What a round costs, measured on the loaded models, and the k it pays to draft.

A round drafts k tokens (k draft steps) and verifies them in one target feed of k+1 rows.
With a per-token acceptance rate a, the round yields 1 + a + ... + a^k tokens on average
(every accepted draft token, plus the target's own). Plain decoding yields one token per
single-row feed. So the tokens per second of a round of k are

    (1 - a^(k+1)) / (1 - a)  /  (k * draft_step + target_feed[k + 1 rows])

and the k worth drafting is the one that maximises it. A request whose draft cache lacks
part of the prompt pays once more before its first round: the draft prefills what it lacks
(its catch-up). Drafting pays for that request only when the time the rounds save over the
tokens it will generate exceeds that catch-up (`draft_pays`). The costs of each row count are
timed on this machine, at load, because they are what decides: how flat a verify stays in
its rows depends on the kernel variant the CPU runs (AVX-512 flatter than AVX2) and on the
context's length, and dense torch weights pick other kernels by row count.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import NamedTuple, Sequence

import torch

# Rows of the timed draft catch-up: prompts reach the draft as feeds of many rows, where a
# row costs less than a one-row step (one read of the weights serves them all).
PREFILL_ROWS = 32


@dataclass(frozen=True)
class RowCosts:
    """Seconds: target[r - 1] is a target feed of r rows after a short prompt; draft is one
    draft step (a one-row draft feed and its head); draft_prefill is a token of a draft
    catch-up and prefill a token of the target's prefill (feeds of PREFILL_ROWS rows, per
    row)."""

    target: tuple[float, ...]
    draft: float
    draft_prefill: float = 0.0
    prefill: float = 0.0

    @property
    def max_k(self) -> int:
        return len(self.target) - 1

    @property
    def warm_token(self) -> float:
        """A prompt token of a warm, which prefills both models (0.0: not timed)."""
        return self.prefill + self.draft_prefill if self.prefill else 0.0

    def round_s(self, k: int) -> float:
        return k * self.draft + self.target[k]

    def to_json(self) -> dict:
        """Milliseconds, for specfill/stats: what the engine prices its rounds at now."""
        return {"target_feed_ms_by_rows": [round(t * 1e3, 2) for t in self.target],
                "draft_step_ms": round(self.draft * 1e3, 2),
                "draft_catch_up_ms_a_token": round(self.draft_prefill * 1e3, 3),
                "prefill_ms_a_token": round(self.prefill * 1e3, 3)}


def expected_tokens(k: int, acceptance: float) -> float:
    """Mean tokens a round of k drafted tokens yields: the accepted prefix plus one."""
    return sum(acceptance ** i for i in range(k + 1))


def tokens_per_s(costs: RowCosts, k: int, acceptance: float) -> float:
    return expected_tokens(k, acceptance) / costs.round_s(k)


def best_k(costs: RowCosts, acceptance: float, k_max: int | None = None) -> int:
    """The k (0 = plain decoding) with the most tokens per second at this acceptance."""
    top = costs.max_k if k_max is None else min(k_max, costs.max_k)
    return max(range(top + 1), key=lambda k: (tokens_per_s(costs, k, acceptance), -k))


def predicted_speedup(costs: RowCosts, k: int, acceptance: float) -> float:
    """Rounds of k over plain decoding, in tokens per second."""
    return tokens_per_s(costs, k, acceptance) / tokens_per_s(costs, 0, acceptance)


def verify_s(costs: RowCosts, rows: int) -> float:
    """A target feed of `rows` rows; past the rows timed, the timed slope carries on (a free
    draft may be longer than any k the model drafts)."""
    timed = costs.target
    if rows <= len(timed):
        return timed[max(rows, 1) - 1]
    slope = (timed[-1] - timed[0]) / (len(timed) - 1) if len(timed) > 1 else timed[0]
    return timed[-1] + (rows - len(timed)) * max(slope, 0.0)


class Odds(NamedTuple):
    """How often a free draft (prompt lookup, the pool) is right where the verify looks:
    `first` at its first token, `later` at a token after one it got right. A copy that
    starts right tends to run on (the rest of a repeated line), while its first token is
    the gamble (did the match pick the right occurrence?), so one geometric rate for both
    understates long runs: in one `bench speculation` run (AMD EPYC Zen 4) prompt lookup
    was right at 0.90 of the positions it was judged at, yet priced at one rate its drafts
    on a function written again were cut near 7 tokens (56 in 8 rounds, 48 accepted)."""

    first: float
    later: float


def free_expected(n: int, odds: Odds) -> float:
    """Mean tokens a round verifying n free tokens yields: the accepted prefix plus one."""
    return 1.0 + odds.first * sum(odds.later ** i for i in range(n))


def free_length(costs: RowCosts, proposed: int, odds: Odds) -> tuple[int, float]:
    """How many of a free draft's `proposed` tokens (no draft step) are worth verifying at
    these odds, and that round's tokens per second."""
    return max(((n, free_expected(n, odds) / verify_s(costs, n + 1)) for n in range(proposed + 1)),
               key=lambda pair: (pair[1], -pair[0]))


def draft_pays(costs: RowCosts, acceptance: float, catch_up: int, tokens: float,
               k_max: int | None = None) -> bool:
    """Whether a request should draft with the model: the seconds its rounds save over
    `tokens` still to generate, against a catch-up of `catch_up` draft tokens first.

    Why (bench engine, native GGUF kernels, 2 cores of an AMD EPYC): the draft's catch-up
    of a cold HumanEval prompt took ~0.5 s (4-5 ms a token), more than rounds of k = 1
    saved on a ~40-token answer, so speculation ran slower than the target alone."""
    k = best_k(costs, acceptance, k_max)
    if k == 0:
        return False
    per_token = costs.round_s(k) / expected_tokens(k, acceptance)
    return tokens * (costs.target[0] - per_token) > catch_up * costs.draft_prefill


# Tokens the draft model may lack and still draft without its catch-up being priced: they
# go in one feed, which reads the weights once like a draft step (8 target rows cost 1.7x
# one row in `bench kernels`, AMD EPYC Zen 4), while the per-token price, timed on 32-row
# feeds, made 2-5 tokens a lookup round settled look dearer than a line's rounds save.
CATCH_UP_ROWS = 8


def catch_up_pays(costs: RowCosts, acceptance: float, missing: int, rest: float | None,
                  rented: int, k_max: int | None = None) -> bool:
    """Whether a draft model that lacks `missing` tokens settled since its last round (by
    free drafts, plain rounds) is worth bringing up to date mid-answer (draft_pays): over
    `rest`, the tokens the answer likely still needs; where that is unknown (None: it ran
    longer than the context's recent answers), over the `rented` rounds that settled a
    single token without it so far (plain rounds, free drafts wrong at their first token),
    so it catches up once they have cost what it would have saved (renting until the rent
    paid equals the price: at most twice the better choice). A large catch-up always waits
    for one such round: that costs less than the smallest one priced, and a copy often ends
    the answer where it runs out.

    Why (`bench speculation`, AMD EPYC Zen 4): an editing replay's answers ran on the pool's
    drafts and ended with a draft round that caught up 50-65 tokens (0.15-0.4 s) to propose
    one token, rejected, while the context's recent answers, blocks among them, said ~60
    more tokens would follow."""
    if missing <= CATCH_UP_ROWS:
        return True
    if rented == 0:
        return False
    return draft_pays(costs, acceptance, missing, rented if rest is None else rest, k_max)


# Live timings kept per row count (and for the draft step, and the catch-up): a median of
# this many follows the machine within a request or two yet ignores a preempted round.
LIVE_KEPT = 16
# Live timings of a row count before they replace the one timed at load.
LIVE_MIN = 3


class LiveCosts:
    """Round costs as the engine's own rounds time them, starting from those timed at load.

    Why: at load the costs are timed in a few repeats on a short prompt, and a noisy VM
    shifts them. In one `bench engine` run (native kernels, 2 cores of an AMD EPYC) a
    one-row feed took 38 ms at load but 30.3 ms in the plain rounds, while two rows took
    37 ms at both; so a round of k = 1 looked like it saved ~10 ms a token and saved ~2,
    and the cold drafts it started never repaid their catch-up. A row count with too few
    live timings of its own is the load timing scaled by how far the live feeds of every
    row count have run from theirs; so are the draft step and its catch-up until they have
    live timings. Why the draft too: a draft that is never run is never timed again, so a
    draft step timed slow at load would keep speculation off for good. In one `bench engine`
    run (native kernels, 2 cores of an Intel Xeon) the load timings came out twice the live
    ones (one-row feed 109 against 55 ms live; draft step 47 ms, 20 ms in earlier runs), and
    with the draft's 47 ms standing, all 40 prompts decoded without drafting. Single-threaded:
    the engine's worker alone observes; readers take `current`, replaced whole."""

    def __init__(self, measured: RowCosts):
        self.measured = measured
        self.current = measured
        self._feeds: dict[int, deque] = {}
        self._ratios: deque = deque(maxlen=LIVE_KEPT * 2)
        self._draft: deque = deque(maxlen=LIVE_KEPT)
        self._prefill: deque = deque(maxlen=LIVE_KEPT)
        self._target_prefill: deque = deque(maxlen=LIVE_KEPT)

    def observe_feed(self, rows: int, seconds: float) -> None:
        """A target feed of `rows` rows (a verify, a plain step) took `seconds`."""
        if not 1 <= rows <= len(self.measured.target):
            return
        self._feeds.setdefault(rows, deque(maxlen=LIVE_KEPT)).append(seconds)
        self._ratios.append(seconds / self.measured.target[rows - 1])
        self._update()

    def observe_draft(self, steps: int, seconds: float) -> None:
        """A proposal of `steps` draft steps took `seconds`."""
        if steps > 0:
            self._draft.append(seconds / steps)
            self._update()

    def observe_catch_up(self, tokens: int, seconds: float) -> None:
        """The draft prefilled `tokens` it lacked in `seconds`; feeds shorter than the timed
        one cost more a token and would overstate it."""
        if tokens >= PREFILL_ROWS:
            self._prefill.append(seconds / tokens)
            self._update()

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """The target prefilled `tokens` of a prompt in `seconds` (shorter feeds overstate a
        token's cost, as for the catch-up)."""
        if tokens >= PREFILL_ROWS:
            self._target_prefill.append(seconds / tokens)
            self._update()

    def _update(self) -> None:
        m = self.measured
        scale = statistics.median(self._ratios) if len(self._ratios) >= LIVE_MIN else 1.0
        target = tuple(
            statistics.median(self._feeds[r]) if len(self._feeds.get(r, ())) >= LIVE_MIN else t * scale
            for r, t in enumerate(m.target, 1))
        draft = statistics.median(self._draft) if len(self._draft) >= LIVE_MIN else m.draft * scale
        catch_up = statistics.median(self._prefill) if self._prefill else m.draft_prefill * scale
        prefill = (statistics.median(self._target_prefill) if self._target_prefill
                   else m.prefill * scale)
        self.current = replace(m, target=target, draft=draft, draft_prefill=catch_up, prefill=prefill)


def _timed(fn, repeats: int) -> float:
    """The fastest of `repeats` calls: another process on the same cores only ever adds
    time, so the minimum is the least disturbed reading of what the call itself costs."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


@torch.inference_mode()
def measure(target_slot, draft_slot, prompt: Sequence[int], max_rows: int, repeats: int = 3) -> RowCosts:
    """Time target feeds of 1..max_rows rows and a draft step after `prompt`, on the slots
    the engine decodes with (rewound after each feed, so nothing is kept)."""
    prompt = list(prompt)
    target_slot.extend(prompt)
    fill = prompt[-1:] * max_rows
    target = []
    for rows in range(1, max_rows + 1):
        def feed() -> None:
            target_slot.feed(fill[:rows])
            target_slot.rewind(len(prompt))
        feed()  # the first call of a shape may build kernel state
        target.append(_timed(feed, repeats))
    draft_slot.extend(prompt)

    def step() -> None:
        draft_slot.feed(prompt[-1:], all_logits=False)
        draft_slot.rewind(len(prompt))
    step()
    draft = _timed(step, repeats * 2)
    block = prompt[-1:] * PREFILL_ROWS

    def catch_up() -> None:
        draft_slot.feed(block, all_logits=False)
        draft_slot.rewind(len(prompt))
    catch_up()
    draft_prefill = _timed(catch_up, repeats) / PREFILL_ROWS
    target_block = prompt[-1:] * PREFILL_ROWS

    def prefill() -> None:
        target_slot.feed(target_block, all_logits=False)
        target_slot.rewind(len(prompt))
    prefill()
    return RowCosts(tuple(target), draft, draft_prefill, _timed(prefill, repeats) / PREFILL_ROWS)
