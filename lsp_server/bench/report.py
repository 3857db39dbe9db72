"""Shared output for the benchmarks: results.json, a markdown table, PNG plots."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Sequence


def machine_info() -> dict[str, Any]:
    import psutil
    import torch

    from lsp_server.kernels import cpu, native

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu.describe(),  # the model and the ISA flags the kernels use
        "kernel_variant": native.variant() if native.available() else f"none ({native.why_unavailable()})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "rss_bytes": psutil.Process().memory_info().rss,
    }


def plain_args(args: Any) -> dict[str, Any]:
    """The command-line arguments worth recording (not the dispatch functions)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None)))}


def median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    tmp.replace(path)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return "" if v is None else str(v)

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def bar_plot(path: Path, labels: Sequence[str], values: Sequence[float], ylabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    bars = ax.bar(labels, values, color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def histogram_plot(path: Path, values: Sequence[int], xlabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    top = max(values) if values else 1
    ax.hist(values, bins=range(0, top + 2), align="left", rwidth=0.85, color="#55a868")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rounds")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
