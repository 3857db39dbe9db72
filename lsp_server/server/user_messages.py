"""How often the user is told: at most one popup per kind of message per minute.

A client stuck in a loop (a didChange for a closed file on every keystroke) must not bury
the editor in popups; the log keeps every occurrence at debug level.
"""

from __future__ import annotations

import time
from typing import Callable


class RateLimiter:
    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 max_kinds: int = 256):
        self.interval_s = interval_s
        self.clock = clock
        self.max_kinds = max_kinds  # kinds are few; the bound only guards against a flood of new ones
        self._last: dict[str, float] = {}

    def allow(self, kind: str) -> bool:
        """True when no message of `kind` was allowed within the last `interval_s`."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) >= self.max_kinds:
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
            if len(self._last) >= self.max_kinds:
                return False
        self._last[kind] = now
        return True
