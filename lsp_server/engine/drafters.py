"""Drafters propose tokens for the target to verify: a small model, or prompt lookup.

Both answer `propose(ids, k, ...) -> Draft`; the engine meters each one separately.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .cache import Aborted, KVSlot, LeanSlot, SlotPool
from .draft_head import draft_head
from .sampling import Sampling, warp
from .types import common_prefix_len


@dataclass
class Draft:
    source: str
    tokens: list[int]
    # [n, V] probabilities the tokens were drawn from; None when the proposal is
    # deterministic (q is one-hot), which is what greedy drafting and lookup give.
    probs: torch.Tensor | None = None


class ModelDrafter:
    """The draft model, run token by token on its own KV cache."""

    name = "draft"

    def __init__(self, model: torch.nn.Module, pool_size: int = 4, lean: bool = False,
                 vocab: int = 0):
        self.pool = SlotPool(model, pool_size, lean=lean)
        self.slot: KVSlot | None = None
        self._seen = 0  # tokens of the request the head has looked at
        # Part of the vocabulary scored (see draft_head), on lean slots only; None: all of it.
        self.head = draft_head(model, vocab) if vocab and isinstance(self.pool.slots[0], LeanSlot) else None
        if self.head is not None:
            for slot in self.pool.slots:
                slot.head = self.head

    def begin(self, ids: Sequence[int], protect: bool = False) -> None:
        self.slot = self.pool.acquire(ids, protect)
        self._seen = len(ids)
        if self.head is not None:
            self.head.focus(ids)

    def missing(self, ids: Sequence[int]) -> int:
        """Tokens of `ids` (all but the last, which a proposal feeds) the cache lacks."""
        assert self.slot is not None
        return max(0, len(ids) - 1 - common_prefix_len(self.slot.ids, ids))

    def prefill(self, ids: Sequence[int], chunk: int, should_abort: Callable[[], bool]) -> int:
        """Bring the draft cache up to all but the last of `ids`; returns tokens fed."""
        assert self.slot is not None
        fed, _ = self.slot.extend(ids[:-1], chunk, should_abort)
        return fed

    def propose(
        self, ids: Sequence[int], k: int, p_min: float, s: Sampling,
        gen: torch.Generator | None, should_abort: Callable[[], bool],
    ) -> Draft:
        """Up to k tokens; stops early after a token whose top-1 probability is below p_min."""
        assert self.slot is not None
        if self.head is not None:  # the tokens accepted since the last proposal
            self.head.include(ids[self._seen:])
        self._seen = len(ids)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        logits = self.slot.sync(ids)  # [V]
        while True:
            if s.greedy:
                probs = torch.softmax(logits.float(), dim=-1)  # [V]
                top_p, top = probs.max(-1)
                token, confidence = int(top), float(top_p)
            else:
                probs = warp(logits, s)
                token = int(torch.multinomial(probs, 1, generator=gen))
                confidence = float(probs.max())
                rows.append(probs)
            tokens.append(token)
            if len(tokens) >= k or confidence < p_min:
                break
            if should_abort():
                raise Aborted()
            logits = self.slot.feed([token], all_logits=False)[-1]
        return Draft(self.name, tokens, torch.stack(rows) if rows else None)


class PromptLookupDrafter:
    """No model: find the newest earlier occurrence of the last n tokens and copy what followed.

    Code repeats itself (names, signatures, the suffix after the cursor), so a match is
    often right, and a proposal costs microseconds instead of k draft forwards.
    """

    name = "lookup"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, ids: Sequence[int], k: int) -> tuple[Draft, int]:
        """Returns the draft (possibly empty) and the length of the n-gram that matched."""
        arr = np.asarray(ids, dtype=np.int64)
        n_ids = len(arr)
        for n in range(min(self.max_ngram, n_ids - 1), self.min_ngram - 1, -1):
            pattern = arr[n_ids - n:]
            # Candidate starts whose first token matches, excluding the pattern itself.
            starts = np.flatnonzero(arr[: n_ids - n] == pattern[0])
            for start in starts[::-1]:  # newest first
                if np.array_equal(arr[start:start + n], pattern):
                    follow = arr[start + n: start + n + k]
                    if len(follow):
                        return Draft(self.name, follow.tolist()), n
        return Draft(self.name, []), 0
