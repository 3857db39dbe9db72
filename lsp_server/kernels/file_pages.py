"""Hand back the pages of read-only weight files once nothing needs them in memory.

After load, the models' GGUF files sit in read-only memory maps (`kernels.gguf`). Loading
read every page of their matrices once, to repack them 8 rows by 8 into the copies the
native kernels multiply (`native.Weight`), and those pages are not read again; they count in
the process's memory for as long as the map lives. `madvise(MADV_DONTNEED)` drops them from
the process; a later read (an embedding row, a matrix that could not be repacked) faults
the page back in from the page cache or the disk.

Only maps that are read-only and file-backed, under the model cache, are touched: no page
of such a map can differ from its file, so dropping one can cost a re-read but never data.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

log = logging.getLogger(__name__)

_MADV_DONTNEED = 4  # the same on every Linux architecture


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str


def read_maps(text: str) -> list[Mapping]:
    """/proc/<pid>/maps lines -> mappings (address range, permissions, path or '')."""
    maps = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        maps.append(Mapping(start, end, fields[1], fields[5].strip() if len(fields) > 5 else ""))
    return maps


def releasable(maps: list[Mapping], roots: Iterable[Path]) -> list[Mapping]:
    """The read-only maps of files under one of `roots` (a deleted file's map never
    qualifies: its path ends in ' (deleted)', which names no file)."""
    prefixes = tuple(str(Path(r).resolve()).rstrip("/") + "/" for r in roots)
    return [m for m in maps if "w" not in m.perms and m.path.startswith(prefixes) and os.path.isfile(m.path)]


def release_cached_pages(roots: Iterable[Path]) -> int:
    """Drop the resident pages of every read-only map of a file under `roots` (the model
    cache, a local model's directory); bytes of address range advised (0 where the platform
    has no /proc/self/maps)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        maps = read_maps(Path("/proc/self/maps").read_text())
    except OSError:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    advised = 0
    for m in releasable(maps, roots):
        if libc.madvise(m.start, m.end - m.start, _MADV_DONTNEED) == 0:
            advised += m.end - m.start
        else:
            log.debug("madvise on %s failed: errno %d", m.path, ctypes.get_errno())
    return advised
