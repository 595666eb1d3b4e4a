"""When mirroring yields: the proxy's own load, and the capture worker's backlog.

Mirrors are shed only when the proxy's own work would delay its clients, never because
other processes hold the CPUs. On a GPU host vLLM's API server, detokenizer and engine
loop keep CPUs busy; there every event loop wakes up late, and a rule on loop lag alone
shed almost every mirror while the client path had nothing to fear. So:

- the proxy sheds (`overload`) while its loop runs late (lag, moving average) *and* its
  own thread is busy (CPU seconds it used per wall second, over about a second): a loop
  that waits for a CPU other processes hold uses little CPU of its own;
- the capture worker is behind (`worker_busy`) when what the proxy sent it has waited too
  long to be handled, or too many bytes are queued: its backlog, not its loop lag.

`overloaded` and `WorkerBacklog` are pure (times are passed in); `LoopLoad.watch` is
the probe that feeds a `LoopLoad`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

LAG_PROBE_S = 0.02
LAG_SMOOTHING = 0.3  # weight of the newest probe in the lag's moving average
BUSY_WINDOW_S = 1.0  # time constant of the busy fraction's moving average


def overloaded(lag_s: float, busy: float, lag_limit_s: float, busy_limit: float) -> bool:
    """The loop runs later than `lag_limit_s` and mostly on its own work (0 < limit)."""
    return 0 < lag_limit_s < lag_s and busy >= busy_limit


@dataclass
class LoopLoad:
    """How late an event loop runs and how busy its own thread is (moving averages)."""

    lag_s: float = 0.0
    busy: float = 0.0  # CPU seconds of the loop's thread per wall second, 0..1

    def update(self, lag_s: float, cpu_s: float, wall_s: float) -> None:
        """One probe: it woke `lag_s` late; the thread used `cpu_s` in the last `wall_s`."""
        self.lag_s += LAG_SMOOTHING * (max(0.0, lag_s) - self.lag_s)
        if wall_s > 0:
            weight = min(1.0, wall_s / BUSY_WINDOW_S)
            self.busy += weight * (min(1.0, max(0.0, cpu_s / wall_s)) - self.busy)

    async def watch(self, interval_s: float = LAG_PROBE_S,
                    cpu_clock: Callable[[], float] = time.thread_time) -> None:
        """Probe forever from the loop's own thread (cancel to stop).

        Lag is smoothed over a few probes, so one late wake-up (the process descheduled
        once) does not shed mirrors; a loop that stays late does.
        """
        loop = asyncio.get_running_loop()
        cpu, wall = cpu_clock(), loop.time()
        while True:
            asked = loop.time() + interval_s
            await asyncio.sleep(interval_s)
            now, now_cpu = loop.time(), cpu_clock()
            self.update(now - asked, now_cpu - cpu, now - wall)
            cpu, wall = now_cpu, now


@dataclass
class WorkerBacklog:
    """What the proxy sent the capture worker and the worker has not reported handled.

    The proxy calls `sent` for every message (with its size) and `handled` when the
    worker reports the bytes it has handled in total; the age of the oldest byte not yet
    reported handled says how far behind the worker is (its reports come every
    `proxy.mirror.worker.process.PROGRESS_REPORT_S`, which is the age of a worker keeping up).
    """

    sent_bytes: int = 0
    handled_bytes: int = 0
    _marks: deque[tuple[int, float]] = field(default_factory=deque)  # (sent so far, when)

    def sent(self, size: int, now: float) -> None:
        self.sent_bytes += size
        self._marks.append((self.sent_bytes, now))

    def handled(self, total_bytes: int) -> None:
        self.handled_bytes = total_bytes
        marks = self._marks
        while marks and marks[0][0] <= total_bytes:
            marks.popleft()

    def reset(self) -> None:
        """A new worker: nothing is owed."""
        self.sent_bytes = self.handled_bytes = 0
        self._marks.clear()

    @property
    def queued_bytes(self) -> int:
        return self.sent_bytes - self.handled_bytes

    def age_s(self, now: float) -> float:
        """How long the oldest byte not yet reported handled has waited (0: none)."""
        return now - self._marks[0][1] if self._marks else 0.0

    def behind(self, now: float, max_delay_s: float, max_bytes: int) -> bool:
        return self.age_s(now) > max_delay_s or self.queued_bytes > max_bytes
