"""The kernels' weight copies in transparent huge pages (Linux), where the system grants them.

A decode step streams ~1 GB of repacked weights (`native.Weight`), and `torch.empty` puts
them in 4 KB pages: ~250,000 of them a step, each a TLB miss and a page walk, and the
hardware prefetchers stop at every 4 KB boundary. In 2 MB pages the same bytes are 500
pages. The products over all of the target's matrices at 8 rows (a verify) took 0.87-0.96
of the time in five runs of `specfill bench kernels --compare-pages` (the two placements
alternating in one process; AMD EPYC Zen 4, 2 threads, avx512); at one and two rows the runs
went either way (0.82-1.12), within that machine's noise.

Linux gives huge pages to anonymous memory in `madvise` mode only where asked
(MADV_HUGEPAGE, before the pages are first touched), and never in `never` mode: then this
costs nothing and changes nothing. Elsewhere (macOS, Windows) the arena is plain memory.
Copies are carved out of 2 MB-aligned maps of CHUNK_BYTES (a larger one gets its own map),
each a tensor that keeps its map alive; SPECFILL_HUGE_PAGES=0 turns it off (plain
`torch.empty`), for comparisons (`specfill bench kernels --compare-pages`). It is made for
copies that live as long as their model: space is never handed out twice, so a copy dropped
early stays reserved until every copy carved from its map is gone (at most two maps'
worth, 2 x CHUNK_BYTES, for copies made and dropped again, as `native.matmul` does in tests).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import threading

import numpy as np
import torch

HUGE_BYTES = 2 << 20  # x86-64's and arm64's (4 KB granule) transparent huge page
CHUNK_BYTES = 64 << 20  # a map shared by smaller copies (most layers' matrices are 1-16 MB)
ALIGN = 4096  # each copy starts on a page: the kernels' loads want 64 bytes at least
# Smaller copies stay in plain memory: not weight matrices worth a page walk (the smallest
# matrices, the draft's q/k/v and o at ~0.5 MB, share the arena's pages with the others)
MIN_BYTES = 64 << 10
ENV = "SPECFILL_HUGE_PAGES"


def enabled() -> bool:
    """Whether weight copies go to the arena: on Linux unless SPECFILL_HUGE_PAGES=0."""
    return sys.platform.startswith("linux") and os.environ.get(ENV, "1") != "0"


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class _Map:
    """An anonymous map advised for huge pages, used from its first 2 MB boundary."""

    def __init__(self, nbytes: int):
        self.map = mmap.mmap(-1, nbytes + HUGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        whole = np.frombuffer(self.map, dtype=np.uint8)
        self.start = (-whole.ctypes.data) % HUGE_BYTES
        self.bytes = whole[self.start:self.start + nbytes]
        advice = getattr(mmap, "MADV_HUGEPAGE", None)
        if advice is not None:
            try:
                self.map.madvise(advice, self.start, nbytes)
            except OSError:  # a kernel without THP: plain pages, as torch.empty's
                pass
        self.used = 0


class Arena:
    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = chunk_bytes
        self._open: _Map | None = None
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...] | torch.Size, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """An uninitialised tensor; in huge-page memory when enabled() and it is a weight
        matrix's size (MIN_BYTES)."""
        shape = tuple(shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if not enabled() or nbytes < MIN_BYTES:
            return torch.empty(shape, dtype=dtype)
        with self._lock:
            if nbytes > self.chunk_bytes // 2:  # its own map: a shared chunk would waste more
                where = _Map(_round_up(nbytes, HUGE_BYTES))
            else:
                if self._open is None or self._open.used + nbytes > len(self._open.bytes):
                    self._open = _Map(self.chunk_bytes)
                where = self._open
            at = where.used
            where.used = _round_up(at + nbytes, ALIGN)
        # The numpy view's base is the map: the tensor keeps it alive, and the map goes
        # when the last copy carved from it does.
        return torch.from_numpy(where.bytes[at:at + nbytes]).view(dtype).view(shape)


_ARENA = Arena()


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """A weight copy's memory (Arena.empty) from the process's arena."""
    return _ARENA.empty(shape, dtype)


def huge_bytes() -> int | None:
    """The process's anonymous memory in huge pages now (/proc/self/smaps_rollup), None where
    the system does not say."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
