"""How often a failed engine worker is restarted: a few times, then the server gives up
(a model that crashes on every request must not reload forever), like an editor that
stops restarting a server after 5 crashes in 3 minutes."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable


class RestartBudget:
    def __init__(self, max_restarts: int = 3, window_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        """True (and counted) when fewer than `max_restarts` happened within the window."""
        now = self.clock()
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self._times)
