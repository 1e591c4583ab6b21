"""The session clock: when this session started and the hard limit it runs under
(`lib.runtime.platforms.session_limit_hours`), read by the loop to stop, saved, before the limit and
by the ETA warning."""

from __future__ import annotations

import time
from dataclasses import dataclass

STOP_MARGIN_MINUTES = 15.0  # stop this long before the limit: save, evaluate, finish the cells


@dataclass(frozen=True)
class Clock:
    """The session's clock: when it started (wall-clock seconds) and its hard limit."""

    started_at: float
    limit_hours: float | None = None

    @property
    def margin_s(self) -> float:
        """What is kept free before the limit (a tenth of a short test limit)."""
        limit_s = (self.limit_hours or 0.0) * 3600
        return min(STOP_MARGIN_MINUTES * 60, 0.1 * limit_s)

    def left_s(self, now: float | None = None) -> float | None:
        """Seconds until the limit (None: no limit)."""
        if self.limit_hours is None:
            return None
        return self.started_at + self.limit_hours * 3600 - (time.time() if now is None else now)

    def must_stop(self, now: float | None = None) -> bool:
        """True once less than the margin is left: save and stop now."""
        left = self.left_s(now)
        return left is not None and left < self.margin_s
