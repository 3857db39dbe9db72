"""What a round costs, measured on the loaded models, and the k it pays to draft.

A round drafts k tokens (k draft steps) and verifies them in one target feed of k+1 rows.
With a per-token acceptance rate a, the round yields 1 + a + ... + a^k tokens on average
(every accepted draft token, plus the target's own). Plain decoding yields one token per
single-row feed. So the tokens per second of a round of k are

    (1 - a^(k+1)) / (1 - a)  /  (k * draft_step + target_feed[k + 1 rows])

and the k worth drafting is the one that maximises it. The costs of each row count are
timed on this machine, at load, because they are what decides: torch's int4 kernel costs
twice as much from 5 rows, zentorch's int8 kernel stays nearly flat, and bf16 oneDNN picks
other kernels by row count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class RowCosts:
    """Seconds: target[r - 1] is a target feed of r rows after a short prompt; draft is one
    draft step (a one-row draft feed and its head)."""

    target: tuple[float, ...]
    draft: float

    @property
    def max_k(self) -> int:
        return len(self.target) - 1

    def round_s(self, k: int) -> float:
        return k * self.draft + self.target[k]


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
    return RowCosts(tuple(target), _timed(step, repeats * 2))
