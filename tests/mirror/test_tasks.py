"""Background tasks: referenced while running, drained then cancelled on shutdown."""

from __future__ import annotations

import asyncio

from proxy.mirror.tasks import BackgroundTasks


async def test_spawn_keeps_reference_and_forgets_when_done():
    tasks = BackgroundTasks()
    task = tasks.spawn(asyncio.sleep(0.01, result=7), "nap")
    assert task is not None and task.get_name() == "nap" and len(tasks) == 1
    assert await task == 7
    await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_drain_waits_then_cancels():
    tasks = BackgroundTasks()
    quick = tasks.spawn(asyncio.sleep(0.01), "quick")
    stuck = tasks.spawn(asyncio.sleep(30), "stuck")
    cancelled = await tasks.drain(0.1)
    assert cancelled == 1
    assert quick is not None and quick.done() and not quick.cancelled()
    assert stuck is not None and stuck.cancelled()
    assert tasks.spawn(asyncio.sleep(0), "late") is None  # closed: refused (and no warning)


async def test_drain_follows_tasks_spawned_while_draining():
    tasks = BackgroundTasks()
    done: list[str] = []

    async def first() -> None:
        await asyncio.sleep(0.01)
        done.append("first")

    tasks.spawn(first(), "first")
    assert await tasks.drain(1.0) == 0
    assert done == ["first"]
