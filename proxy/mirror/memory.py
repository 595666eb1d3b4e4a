"""Giving memory back to the system after a burst of large answers.

Freed Python objects go back to glibc's malloc, which keeps most of what a burst took
(the heap top is returned only past a threshold, free pages inside the heap or in
another arena never): 40 answers capped at 64 MB left a worker at 2.7 GB for most of a
minute, not its 120 MB idle size. So, every `check_every_s`: while the process's RSS is
`grow_bytes` above the lowest it has been, collect the cycles (a capture's buffers may
hang in one until the next full collection) and call glibc's `malloc_trim(0)`, which
returns every free page; at most once per `min_interval_s`, so a process that holds that
much in live data pays one full collection and trim per interval, a steady small one
never. Elsewhere than glibc only the collection runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import math
import os
from collections.abc import Callable
from time import monotonic, perf_counter

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
GROW_BYTES = 64 * 1024 * 1024
MIN_INTERVAL_S = 10.0
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def glibc_malloc_trim() -> Callable[[], object] | None:
    """`malloc_trim(0)` of the C library when it is glibc, else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class MemoryRelease:
    """Decides when to collect and trim: RSS `grow_bytes` over its low, and not within
    `min_interval_s` of the last time."""

    def __init__(self, *, rss: Callable[[], int] = rss_bytes,
                 trim: Callable[[], object] | None = None, grow_bytes: int = GROW_BYTES,
                 min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._rss, self._trim = rss, trim
        self.grow_bytes, self.min_interval_s = grow_bytes, min_interval_s
        self.low_bytes = rss()
        self._last_s = -math.inf
        self.releases = 0

    def check(self, now_s: float) -> bool:
        """Collect and trim when due; True when it did."""
        rss = self._rss()
        self.low_bytes = min(self.low_bytes, rss)
        if rss < self.low_bytes + self.grow_bytes or now_s - self._last_s < self.min_interval_s:
            return False
        started = perf_counter()
        gc.collect()
        if self._trim is not None:
            self._trim()
        self._last_s, self.releases = now_s, self.releases + 1
        after = self._rss()
        self.low_bytes = min(self.low_bytes, after)
        log.debug("gave memory back: RSS %d -> %d MiB in %.0f ms", rss >> 20, after >> 20,
                  (perf_counter() - started) * 1000)
        return True


async def release_memory_forever(check_every_s: float = CHECK_EVERY_S) -> None:
    """Run until cancelled (a background task of the capture worker)."""
    release = MemoryRelease(trim=glibc_malloc_trim())
    while True:
        await asyncio.sleep(check_every_s)
        release.check(monotonic())
