"""The pool of earlier token ids: what it proposes, what it refuses, and its fixed memory."""

from __future__ import annotations

import random

import numpy as np

from lsp_server.engine.drafters import CONTEXT, PoolDrafter
from lsp_server.engine.token_pool import TokenPool


def test_a_seen_sequence_is_continued_from_its_longest_match():
    pool = TokenPool(capacity=1 << 12)
    seen = list(range(100, 160))
    pool.add(seen)
    match = pool.longest([7, 8, *seen[10:30]], limit=50)
    assert match is not None and match.tokens == seen[30:]  # up to the sequence's end, not past it
    assert match.length == 20  # measured on the tokens, not the order that hit


def test_the_newest_occurrence_wins_and_the_limit_caps_the_proposal():
    pool = TokenPool(capacity=1 << 12)
    pool.add([1, 2, 3, 4, 50, 51, 52])
    pool.add([1, 2, 3, 4, 60, 61, 62])
    assert pool.longest([9, 1, 2, 3, 4], limit=2).tokens == [60, 61]


def test_a_tail_shorter_than_every_order_or_unseen_proposes_nothing():
    pool = TokenPool(capacity=1 << 12)
    pool.add(list(range(50)))
    assert pool.longest([1, 2, 3], limit=8) is None  # shorter than the shortest order (4)
    assert pool.longest([1000, 1001, 1002, 1003, 1004], limit=8) is None
    assert pool.longest(list(range(10)), limit=0) is None


def test_memory_is_fixed_and_the_oldest_tokens_are_dropped():
    pool = TokenPool(capacity=1 << 10)
    size = pool.nbytes
    first = list(range(5000, 5100))
    pool.add(first)
    rng = random.Random(0)
    for _ in range(200):  # ~20x the ring: a large file's worth of other text
        pool.add(rng.choices(range(4000), k=100))
    assert pool.nbytes == size and pool.held == pool.capacity
    assert pool.longest(first[:40], limit=8) is None  # overwritten: never a stale proposal
    last = rng.choices(range(4000), k=100)
    pool.add(last)
    assert pool.longest(last[:40], limit=8).tokens == last[40:48]


def test_a_sequence_longer_than_the_ring_keeps_its_newest_part():
    pool = TokenPool(capacity=1 << 10)
    long = [i % 997 + 3 * (i // 997) for i in range(10_000)]
    pool.add(long)
    assert pool.longest(long[-100:-60], limit=5).tokens == long[-60:-55]


def test_binary_garbage_and_huge_ids_are_stored_and_matched_exactly():
    rng = np.random.default_rng(0)
    garbage = rng.integers(0, 152_000, size=3000).tolist()
    pool = TokenPool(capacity=1 << 12)
    pool.add(garbage)
    assert pool.longest(garbage[:500], limit=10).tokens == garbage[500:510]
    # hash collisions are checked against the tokens: a random tail finds nothing
    for _ in range(50):
        assert pool.longest(rng.integers(0, 152_000, size=20).tolist(), limit=10) is None


def test_a_10000_token_match_is_capped_at_the_limit():
    pool = TokenPool(capacity=1 << 15)
    text = [i % 251 + 1000 * (i // 251) for i in range(10_000)]
    pool.add(text)
    match = pool.longest(text[:200], limit=15)
    assert match.tokens == text[200:215] and match.length == 64  # measured up to the cap


def test_prompts_are_indexed_by_what_changed_only():
    drafter = PoolDrafter(capacity=1 << 14, output_capacity=1 << 10)
    prompt = list(range(1000, 2000))
    assert drafter.see_prompt(prompt) == 1000
    assert drafter.see_prompt(prompt) == 0  # a warm and its request: the same window
    typed = prompt[:600] + [7] + prompt[600:]  # one token typed mid-window
    assert drafter.see_prompt(typed) == 1 + 2 * CONTEXT
    # both the unchanged text and the typed token are proposed from
    assert drafter.propose(typed[:580], limit=4)[0].tokens == typed[580:584]
    assert drafter.propose(typed[:601], limit=4)[0].tokens == typed[601:605]


def test_generations_are_preferred_to_prompts_on_a_tie():
    drafter = PoolDrafter(capacity=1 << 12, output_capacity=1 << 10)
    context = list(range(300, 340))
    drafter.see_prompt(context + [1, 2, 3])
    drafter.see_output(context, [9, 9, 8])
    draft, match = drafter.propose(context, limit=3)
    assert draft.source == "pool" and draft.tokens == [9, 9, 8] and match == 40


def test_snapshot_reports_the_fixed_memory():
    drafter = PoolDrafter(capacity=1 << 12, output_capacity=1 << 10)
    before = drafter.snapshot()["bytes"]
    drafter.see_prompt(list(range(5000)))
    after = drafter.snapshot()
    assert after["bytes"] == before and after["prompt_tokens_held"] == 1 << 12
    drafter.clear()
    assert drafter.snapshot()["tokens_seen"] == 0
