"""Drafters propose tokens for the target to verify: a small model, prompt lookup, or the
pool of what the engine has seen before (token_pool).

Each answers `propose(ids, k, ...)`; the engine meters each one separately.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .cache import Aborted, KVSlot, LeanSlot, SlotPool
from .draft_head import draft_head
from .sampling import Sampling, warp
from .token_pool import MATCH_CAP, ORDERS, TokenPool
from .types import common_prefix_len


@dataclass
class Draft:
    source: str
    tokens: list[int]
    # [n, V] probabilities the tokens were drawn from; None when the proposal is
    # deterministic (q is one-hot), which is what greedy drafting and lookup give.
    probs: torch.Tensor | None = None
    match: int = 0  # a free draft: how long a tail of the context it matched


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

    def begin(self, ids: Sequence[int], protect: bool = False, keep: bool = False) -> None:
        self.slot = self.pool.acquire(ids, protect, keep)
        self._seen = len(ids)
        if self.head is not None:  # scores other ids now than the slot's kept logits had
            self.head.focus(ids)
            self.slot.forget_next()

    def missing(self, ids: Sequence[int]) -> int:
        """Tokens of `ids` (all but the last, which a proposal feeds) the cache lacks."""
        assert self.slot is not None
        return max(0, len(ids) - 1 - common_prefix_len(self.slot.ids, ids))

    def prefill(self, ids: Sequence[int], chunk: int, should_abort: Callable[[], bool], first: int = 0) -> int:
        """Bring the draft cache up to all but the last of `ids`, in chunks growing from
        `first` rows (KVSlot.extend); returns tokens fed."""
        assert self.slot is not None
        fed, _ = self.slot.extend(ids[:-1], chunk, should_abort, first)
        return fed

    def propose(
        self, ids: Sequence[int], k: int, p_min: float, s: Sampling,
        gen: torch.Generator | None, should_abort: Callable[[], bool],
        ends: Callable[[int], bool] | None = None,
    ) -> Draft:
        """Up to k tokens; stops early after a token whose top-1 probability is below p_min,
        and after a token that `ends` the answer (it is told each token in turn)."""
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
            if len(tokens) >= k or confidence < p_min or (ends is not None and ends(token)):
                break
            if should_abort():
                raise Aborted()
            logits = self.slot.feed([token], all_logits=False)[-1]
        return Draft(self.name, tokens, torch.stack(rows) if rows else None)


class AheadDrafter:
    """No model at request time: the draft model's proposal made while the cursor rested.

    A warm knows the answer's first token (the target's greedy pick from the logits the warm
    leaves in its slot), so the draft model can draft the tokens after it at rest, and the
    request's first round is a verify alone instead of k draft steps and a verify. Its tokens
    are the draft model's, priced at the draft model's acceptance (draft_choice.pick_free).
    Why: a line's answer is a few rounds, and the first round's draft steps cost it most of
    what its rounds saved over plain decoding (`bench speculation` on an AVX2 Zen 3, off /
    adaptive: lines 1.00x without this, 1.22x with it)."""

    name = "ahead"

    def __init__(self, held: int = 4):
        # (context: the prompt and the first token, the tokens drafted after it), newest last
        self._held: deque[tuple[tuple[int, ...], tuple[int, ...]]] = deque(maxlen=held)

    def keep(self, context: Sequence[int], tokens: Sequence[int]) -> None:
        context = tuple(context)
        for old in [h for h in self._held if h[0] == context]:
            self._held.remove(old)
        if tokens:
            self._held.append((context, tuple(tokens)))

    def propose(self, ids: Sequence[int], limit: int) -> Draft:
        """What was drafted at rest after `ids`, when `ids` is a context kept here followed by
        the first of those tokens (a round that accepted some of them); up to `limit`."""
        for context, tokens in reversed(self._held):
            n = len(ids) - len(context)
            if 0 <= n < len(tokens) and ids[len(context) - 1] == context[-1] \
                    and tuple(ids[len(context):]) == tokens[:n] and tuple(ids[:len(context)]) == context:
                return Draft(self.name, list(tokens[n:n + limit]))
        return Draft(self.name, [])

    def clear(self) -> None:
        self._held.clear()


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


# Prompts remembered to feed the pool only what a new one changes (a warm, its request and
# the precomputes after it mostly repeat one window).
RECENT_PROMPTS = 8
# Tokens of unchanged prompt kept on each side of a changed part, so the n-grams that cross
# into it are indexed and its continuation runs on a little.
CONTEXT = max(ORDERS)
# A generation's match is preferred unless a prompt's is longer by more than this: what the
# server produced (and the editor showed) is the likelier repeat.
OUTPUT_BONUS = 4


class PoolDrafter:
    """No model: continue the tail from the prompts and generations of earlier requests.

    Two pools, so a large file open cannot push out the completions: `shown` (every prompt
    the engine prefilled: the open file's window, the cross-file chunks) and `made` (every
    generation, after the prompt tokens that led to it)."""

    name = "pool"

    def __init__(self, capacity: int = 1 << 20, output_capacity: int = 1 << 18):
        self.shown = TokenPool(capacity)
        self.made = TokenPool(output_capacity)
        # (prompt, the oldest ring position its tokens lie at), newest last
        self._recent: deque[tuple[np.ndarray, int]] = deque(maxlen=RECENT_PROMPTS)

    def see_prompt(self, ids: Sequence[int]) -> int:
        """Index the part of a prompt the recent ones lack; returns the tokens added."""
        arr = np.asarray(ids, dtype=np.int64)
        start, end, oldest = self._changed(arr)
        if start >= end:
            return 0
        start, end = max(0, start - CONTEXT), min(len(arr), end + CONTEXT)
        oldest = min(oldest, self.shown.total)
        self.shown.add(arr[start:end])
        self._recent.append((arr, oldest))
        return end - start

    def _changed(self, arr: np.ndarray) -> tuple[int, int, int]:
        """[start, end) of `arr` that differs from the most similar recent prompt whose
        tokens are all still in the ring (the whole of it where none is), and the oldest
        ring position the unchanged rest relies on."""
        best = (0, len(arr), self.shown.total)
        for old, oldest in self._recent:
            if oldest < self.shown.total - self.shown.capacity:
                continue  # part of it was overwritten: its n-grams may be gone
            head = _common_prefix(old, arr)
            tail = min(_common_prefix(old[::-1], arr[::-1]), len(arr) - head, len(old) - head)
            if len(arr) - head - tail < best[1] - best[0]:
                best = (head, len(arr) - tail, oldest)
        return best

    def see_output(self, prompt: Sequence[int], generated: Sequence[int]) -> None:
        if generated:
            # with as much of the prompt as a match is measured over, so a generation's
            # match is not cut shorter than the same text's in the prompt pool
            self.made.add(list(prompt[-MATCH_CAP:]) + list(generated))

    def propose(self, ids: Sequence[int], limit: int) -> tuple[Draft, int]:
        """Up to `limit` tokens that followed the tail's longest match; (draft, match length)."""
        made = self.made.longest(ids, limit)
        shown = self.shown.longest(ids, limit)
        match = made if made and (shown is None or made.length + OUTPUT_BONUS >= shown.length) else shown
        if match is None:
            return Draft(self.name, []), 0
        return Draft(self.name, match.tokens), match.length

    def clear(self) -> None:
        self.shown.clear()
        self.made.clear()
        self._recent.clear()

    def snapshot(self) -> dict[str, int]:
        """What the pool holds and its fixed memory (for specfill/stats and the benchmark)."""
        return {"prompt_tokens_held": self.shown.held, "output_tokens_held": self.made.held,
                "tokens_seen": self.shown.total + self.made.total,
                "bytes": self.shown.nbytes + self.made.nbytes}


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
