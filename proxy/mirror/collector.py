"""Garbage collection on a timer, so its pauses stay short while streams are in flight.

CPython starts a young collection when allocations outnumber deallocations by a
threshold. Under steady streaming traffic the requests that end free about as many
objects as new ones allocate, so that count hardly moves while the young generation
keeps growing; when a collection finally runs it walks tens of thousands of objects
and stalls every stream for 20-60 ms. Collecting the young generations every
`young_every_s` keeps each pass to what a fraction of a second allocated (a few ms at
most); a full collection, which walks every live object, runs every `full_every_s`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from time import perf_counter

log = logging.getLogger(__name__)

YOUNG_EVERY_S = 0.2
FULL_EVERY_S = 60.0
SLOW_PASS_S = 0.05  # a pass longer than this is logged (at debug level)


async def pace_garbage_collection(young_every_s: float = YOUNG_EVERY_S,
                                  full_every_s: float = FULL_EVERY_S) -> None:
    """Run until cancelled with automatic collection off; restore it when cancelled."""
    was_enabled = gc.isenabled()
    gc.disable()
    passes_per_full = max(1, round(full_every_s / young_every_s))
    passes = 0
    try:
        while True:
            await asyncio.sleep(young_every_s)
            passes += 1
            generation = 2 if passes % passes_per_full == 0 else 1
            started = perf_counter()
            found = gc.collect(generation)
            took_s = perf_counter() - started
            if took_s > SLOW_PASS_S:
                log.debug("gc generation %d took %.0f ms (%d unreachable)", generation,
                          took_s * 1000, found)
    finally:
        if was_enabled:
            gc.enable()
