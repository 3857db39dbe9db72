"""The weight copies' arena (lsp_server/kernels/huge_pages.py): copies carved from shared maps
without overlapping, each on its own page, a large one in its own 2 MB-aligned map, alive as
long as the tensor is, plain memory when switched off; and the kernels' products from it the
same bits as from plain memory."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from lsp_server.kernels import huge_pages, native
from tests.kernels.test_native_kernels import random_weights, random_x

MB = 1 << 20
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")


@pytest.fixture
def pages_on(monkeypatch):
    monkeypatch.setenv(huge_pages.ENV, "1")


@linux_only
def test_copies_share_a_map_without_overlapping(pages_on):
    arena = huge_pages.Arena(chunk_bytes=16 * MB)
    a = arena.empty((3 * MB + 5,))
    b = arena.empty((MB // 4, 4), torch.float32)  # 4 MB
    assert a.shape == (3 * MB + 5,) and b.shape == (MB // 4, 4) and b.dtype == torch.float32
    assert a.data_ptr() % huge_pages.HUGE_BYTES == 0  # a fresh map's first copy: on its 2 MB boundary
    assert b.data_ptr() == a.data_ptr() + huge_pages._round_up(a.numel(), huge_pages.ALIGN)
    a.fill_(7)
    b.fill_(-1.5)
    assert int(a.min()) == int(a.max()) == 7 and float(b.min()) == float(b.max()) == -1.5


@linux_only
def test_a_full_map_opens_another_and_a_large_copy_has_its_own(pages_on):
    arena = huge_pages.Arena(chunk_bytes=8 * MB)
    first, second = arena.empty((3 * MB,)), arena.empty((3 * MB,))
    third = arena.empty((3 * MB,))  # 6 MB used of 8: a new map
    assert second.data_ptr() == first.data_ptr() + 3 * MB
    assert not first.data_ptr() <= third.data_ptr() < first.data_ptr() + 8 * MB
    large = arena.empty((5 * MB,))  # more than half a map: its own
    assert large.data_ptr() % huge_pages.HUGE_BYTES == 0
    fourth = arena.empty((MB * 2,))  # the open map is still the third's
    assert fourth.data_ptr() == third.data_ptr() + 3 * MB


@linux_only
def test_a_copy_keeps_its_map_alive(pages_on):
    arena = huge_pages.Arena(chunk_bytes=8 * MB)
    kept = arena.empty((4 * MB,))
    del arena
    gc.collect()
    kept.fill_(3)  # would fault if the map had gone with the arena
    assert int(kept.sum()) == 3 * 4 * MB


def test_small_copies_and_switched_off_are_plain_memory(monkeypatch):
    monkeypatch.setenv(huge_pages.ENV, "1")
    arena = huge_pages.Arena(chunk_bytes=8 * MB)
    small = arena.empty((16 << 10,))  # not a weight matrix's size
    assert small.shape == (16 << 10,) and arena._open is None
    monkeypatch.setenv(huge_pages.ENV, "0")
    off = arena.empty((4 * MB,))
    assert off.shape == (4 * MB,) and arena._open is None and not huge_pages.enabled()


@pytest.mark.skipif(not native.available(), reason="the native kernels are not built")
def test_products_from_the_arena_equal_those_from_plain_memory(monkeypatch):
    blocks = random_weights(12, 4096, 1536, seed=3, realistic=True)  # Q4_K, 3.4 MB
    x = random_x(3, 1536, seed=4)
    outs = []
    for setting in ("0", "1"):
        monkeypatch.setenv(huge_pages.ENV, setting)
        weight = native.Weight(12, blocks, 1536)
        out = torch.empty(3, 4096)
        weight.matmul(x, out)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])


def test_a_stacked_weight_is_carved_from_the_arena_too(monkeypatch):
    """Weight.stacked (made-up parts fused after their first use) copies into the arena, as
    every weight copy does: the fused layers are most of a step's bytes."""
    parts = [native.Weight(12, random_weights(12, n, 1536, seed=n, realistic=True), 1536) for n in (64, 32)]
    x = random_x(2, 1536, seed=5)
    before = [p.matmul(x, torch.empty(2, p.N)) for p in parts]
    asked = []
    real = huge_pages.empty
    monkeypatch.setattr(huge_pages, "empty", lambda shape, dtype=torch.uint8: asked.append(tuple(shape)) or real(shape, dtype))
    stacked = native.Weight.stacked(parts)
    assert asked == [tuple(stacked.weight.shape)] and stacked.N == 96
    out = stacked.matmul(x, torch.empty(2, 96))
    assert torch.equal(out, torch.cat(before, dim=1))
    assert all(torch.equal(p.matmul(x, torch.empty(2, p.N)), b) for p, b in zip(parts, before))
