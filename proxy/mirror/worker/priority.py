"""The capture worker's scheduling: below the relay, so capture never delays a client."""

from __future__ import annotations

import os

NICE = 10  # --worker-priority nice: a tenth of a nice-0 process's CPU share when both want it


def lower_priority(priority: str) -> str:
    """Yield the CPU to the relay: capture must not delay a client.

    nice: nice 10, a tenth of the CPU share of a nice-0 process (the relay, the engines)
    when both want it, but never nothing: on a host whose CPUs vLLM's processes keep
    busy the worker still keeps up with light traffic. idle: Linux SCHED_IDLE, only CPU
    time nothing else wants; there the worker falls behind and the proxy sheds mirrors.
    """
    if priority == "nice":
        os.nice(NICE)
        return f"nice {NICE}"
    if priority == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "SCHED_IDLE"
        except (AttributeError, OSError):  # not Linux
            os.nice(19)
            return "nice 19"
    return "normal"
