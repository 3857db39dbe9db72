"""Handing back the pages of read-only weight files: only read-only file maps under the
given roots are touched, and their data reads back the same afterwards."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from lsp_server.kernels.file_pages import Mapping, read_maps, release_cached_pages, releasable
from tests.resident_pages import resident_kb

MAPS = """\
7efa87800000-7efae3810000 r--s 00000000 fe:00 16040092                   {root}/m/model.gguf
7efae3a00000-7efbb7791000 rw-p 00000000 fe:00 16040012                   {root}/m/hf/model.safetensors
7efbb7800000-7efbb7900000 r--p 00000000 fe:00 16040013                   /usr/lib/libc.so.6
7efbb7900000-7efbb7a00000 r--s 00000000 fe:00 16040014                   {root}/gone.bin (deleted)
7efbb7a00000-7efbb7b00000 rw-p 00000000 00:00 0
7ffd0000-7ffd1000 r--p 00000000 00:00 0                          [vvar]
"""


def test_maps_lines_are_read_with_or_without_a_path(tmp_path: Path) -> None:
    maps = read_maps(MAPS.format(root=tmp_path))
    assert maps[0] == Mapping(0x7EFA87800000, 0x7EFAE3810000, "r--s", f"{tmp_path}/m/model.gguf")
    assert maps[4].path == "" and maps[5].path == "[vvar]"


def test_only_read_only_maps_of_existing_files_under_a_root_qualify(tmp_path: Path) -> None:
    for name in ("m/model.gguf", "m/hf/model.safetensors", "gone.bin"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "gone.bin").unlink()
    chosen = releasable(read_maps(MAPS.format(root=tmp_path)), [tmp_path])
    # the writable safetensors map may hold pages that differ from its file: never touched
    assert [m.path for m in chosen] == [f"{tmp_path}/m/model.gguf"]
    assert releasable(read_maps(MAPS.format(root=tmp_path)), [tmp_path / "elsewhere"]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_a_released_map_drops_its_resident_pages_and_reads_back_the_same(tmp_path: Path) -> None:
    data = bytes(range(256)) * (4 << 12)  # 4 MiB
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert mapped[:] == data  # every page touched
    assert resident_kb(path) >= 4096
    assert release_cached_pages([tmp_path]) >= len(data)
    assert resident_kb(path) == 0
    assert mapped[:] == data
    mapped.close()
