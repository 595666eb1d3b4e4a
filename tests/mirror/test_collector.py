"""The GC pacer: automatic collection off while it runs, cycles still collected, state restored."""

from __future__ import annotations

import asyncio
import gc
import weakref

from proxy.mirror.collector import pace_garbage_collection


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


async def test_collects_cycles_on_its_timer_and_restores_automatic_collection():
    assert gc.isenabled()
    pacer = asyncio.get_running_loop().create_task(pace_garbage_collection(0.01, 0.03))
    await asyncio.sleep(0)
    assert not gc.isenabled()  # only the pacer collects now
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    gone = weakref.ref(a)
    del a, b
    for _ in range(100):
        await asyncio.sleep(0.01)
        if gone() is None:
            break
    assert gone() is None
    pacer.cancel()
    await asyncio.gather(pacer, return_exceptions=True)
    assert gc.isenabled()
