"""How much of a file this process holds in memory through its maps (Linux /proc/self/smaps)."""

from __future__ import annotations

from pathlib import Path


def resident_kb(path: Path | str) -> int:
    """Resident kB of this process's maps of `path`."""
    target = str(Path(path).resolve())
    total, current = 0, None
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
            current = head[5] if len(head) > 5 else ""
        elif line.startswith("Rss:") and current == target:
            total += int(head[1])
    return total
