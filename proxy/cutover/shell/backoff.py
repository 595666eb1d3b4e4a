"""Back-off and quiet logs for persistent failures (state file, Docker, admin API).

A step that cannot be persisted or a daemon that stays away is retried after a delay that
doubles up to a cap, never in a loop; and a failure that repeats is logged at most once
per kind and interval, the next line saying how many were suppressed in between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class Backoff:
    """Delays `first_s`, 2x, 4x ... up to `max_s`; `reset()` after a success."""

    def __init__(self, first_s: float, max_s: float = 30.0) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.first_s * (2 ** min(self.failures, 30)), self.max_s)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


class LogThrottle:
    """At most one line per failure `kind` per `interval_s`, with the suppressed count."""

    def __init__(self, logger: logging.Logger, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, kind: str, message: str, *args: object) -> bool:
        """Log (True) or count as suppressed (False)."""
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += " (%d more like it in the last %.0f s)"
            args = (*args, suppressed, 0.0 if last is None else now - last)
        self._last[kind] = now
        self._logger.log(level, message, *args)
        return True
