"""A GGUF file's tensor table (name, type, dims, offset, bytes), kept beside the file.

The gguf package's reader parses every metadata array (the 151,936-entry vocabulary among
them) in Python: 15-20 s on 2 cores for the default target. The table it yields is all the
kernels need, so it is written once (by `specfill models fetch`, or the first load) next to
the file as `.NAME.tensors.json`, keyed by the file's size and mtime. No torch here."""

from __future__ import annotations

import json
import os
from pathlib import Path

INDEX_VERSION = 1


def _index_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tensors.json")


def _read_index(path: Path) -> list[list] | None:
    """The file's tensor table as recorded beside it, if it still describes this file."""
    stat = path.stat()
    try:
        data = json.loads(_index_path(path).read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != INDEX_VERSION or data.get("size") != stat.st_size or data.get("mtime_ns") != stat.st_mtime_ns:
        return None
    return data["tensors"]


def _write_index(path: Path, tensors: list[list]) -> None:
    """Best effort: a directory we cannot write to just means parsing the header next time."""
    stat = path.stat()
    data = {"version": INDEX_VERSION, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "tensors": tensors}
    tmp = _index_path(path).with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data))
        os.replace(tmp, _index_path(path))
    except OSError:
        tmp.unlink(missing_ok=True)


def tensor_table(path: Path) -> list[list]:
    """[name, ggml type, dims (GGUF order), data offset, bytes] of every tensor."""
    table = _read_index(path)
    if table is None:
        from gguf import GGUFReader

        reader = GGUFReader(path, "r")
        table = [[t.name, int(t.tensor_type), [int(d) for d in t.shape], int(t.data_offset), int(t.n_bytes)]
                 for t in reader.tensors]
        del reader
        _write_index(path, table)
    return table
