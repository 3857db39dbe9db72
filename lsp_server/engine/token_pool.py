"""A bounded pool of the token ids the engine has seen, across requests: where each n-gram
last occurred, and what followed it.

Why: most tokens an editor asks for are predictable from text the server already held, the
open file, its neighbours, and the completions shown a minute ago, yet the prompt lookup
sees only the request's own prompt. A match here costs no draft step, so it may propose as
many tokens as the match supports (llama.cpp's `ngram-mod`, SuffixDecoding).

Memory is fixed at construction: a ring of `capacity` token ids (the oldest overwritten)
and per n-gram order a table of BUCKETS_PER_TOKEN x `capacity` positions (a bucket keeps
its newest occurrence; 52 bytes a token in all). A hashed hit is only a hint: the tokens are
compared before anything is proposed, so a collision or an overwritten ring slot proposes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# n-gram lengths indexed, longest tried first: a long match names its context precisely,
# a short one still finds a name's usual continuation.
ORDERS = (16, 8, 4)
SEPARATOR = -1  # ends each fed sequence: a continuation never runs into the next one
MATCH_CAP = 64  # how far back a match is measured (longer says nothing more)
_MULT = np.uint64(0x9E3779B97F4A7C15)
# Buckets per ring slot: with as many buckets as tokens a full ring's newer n-grams had
# taken the bucket of ~37 % of the older ones (a test's 3,000 random tokens lost a match);
# with 4 ~22 %, per order, and a lost long match still finds a shorter one.
BUCKETS_PER_TOKEN = 4


@dataclass(frozen=True)
class Match:
    """A continuation found in the pool: `tokens` followed `length` tokens equal to the
    query's tail."""

    tokens: list[int]
    length: int


def window_hashes(arr: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit hash of every window of n tokens (len(arr) - n + 1 of them)."""
    count = len(arr) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    keys = arr.astype(np.uint64)
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = (h ^ keys[j:j + count]) * _MULT
        return h ^ (h >> np.uint64(29))


class TokenPool:
    """Ring of token ids plus, per order, hash bucket -> the position (mod 2**32) of the
    token that followed the newest n-gram in that bucket."""

    def __init__(self, capacity: int = 1 << 20, orders: Sequence[int] = ORDERS):
        self.bits = max(8, int(capacity - 1).bit_length())
        self.capacity = 1 << self.bits
        self.orders = tuple(sorted(orders, reverse=True))
        self.ring = np.full(self.capacity, SEPARATOR, dtype=np.int32)
        self.mask = np.uint64(BUCKETS_PER_TOKEN * self.capacity - 1)
        self.tables = {n: np.zeros(BUCKETS_PER_TOKEN * self.capacity, dtype=np.uint32)
                       for n in self.orders}
        self.total = 0  # tokens ever written (separators included): the next position

    @property
    def nbytes(self) -> int:
        return self.ring.nbytes + sum(t.nbytes for t in self.tables.values())

    @property
    def held(self) -> int:
        """Tokens the ring holds now (separators included)."""
        return min(self.total, self.capacity)

    def clear(self) -> None:
        self.ring.fill(SEPARATOR)
        for table in self.tables.values():
            table.fill(0)
        self.total = 0

    def add(self, ids: Sequence[int]) -> None:
        """Append one sequence (then a separator) and index its n-grams."""
        arr = np.asarray(ids, dtype=np.int64)[-(self.capacity - 1):]
        if len(arr) == 0:
            return
        start = self.total
        positions = (start + np.arange(len(arr) + 1)) & (self.capacity - 1)
        self.ring[positions] = np.append(arr, SEPARATOR).astype(np.int32)
        self.total += len(arr) + 1
        for n in self.orders:
            # windows whose next token is still in the sequence; the newest wins a bucket
            hashes = window_hashes(arr[:-1], n)
            if len(hashes):
                buckets = (hashes & self.mask).astype(np.int64)
                follows = start + n + np.arange(len(hashes), dtype=np.int64)
                self.tables[n][buckets] = (follows & 0xFFFFFFFF).astype(np.uint32)

    def longest(self, ids: Sequence[int], limit: int) -> Match | None:
        """The continuation (up to `limit` tokens) after the longest-order n-gram of `ids`'
        tail found here, or None."""
        if limit <= 0:
            return None
        tail = np.asarray(ids[-MATCH_CAP:], dtype=np.int64)
        for n in self.orders:
            if len(tail) < n:
                continue
            bucket = int(window_hashes(tail[-n:], n)[0] & self.mask)
            # the newest position that is the stored one mod 2**32 (the ring is far shorter)
            follow = self.total - ((self.total - int(self.tables[n][bucket])) & 0xFFFFFFFF)
            length = self._matched(tail, follow, n)
            if length:
                tokens = self._continuation(follow, limit)
                if tokens:
                    return Match(tokens, length)
        return None

    def _valid(self, position: int) -> bool:
        return self.total - self.capacity <= position < self.total

    def _at(self, positions: np.ndarray) -> np.ndarray:
        return self.ring[positions & (self.capacity - 1)]

    def _matched(self, tail: np.ndarray, follow: int, n: int) -> int:
        """How many tokens before `follow` equal the tail's end (0 unless at least n)."""
        if follow < 0 or not self._valid(follow - n):
            return 0
        back = min(len(tail), follow - max(0, self.total - self.capacity))
        stored = self._at(np.arange(follow - back, follow))
        same = stored[::-1] == tail[::-1][:back]
        length = int(np.argmin(same)) if not same.all() else back
        return length if length >= n else 0

    def _continuation(self, follow: int, limit: int) -> list[int]:
        end = min(self.total, follow + limit)
        if not self._valid(follow) or end <= follow:
            return []
        tokens = self._at(np.arange(follow, end))
        cut = np.flatnonzero(tokens == SEPARATOR)
        return tokens[: cut[0] if len(cut) else len(tokens)].tolist()
