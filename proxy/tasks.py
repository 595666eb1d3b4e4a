"""The one place tasks are created (`tests/test_tasks.py` checks that no other module of
`proxy/` calls `create_task` or `ensure_future`): each is named and logs its failure.

`start_task` is for a task its caller holds (a watcher cancelled at shutdown, a writer
awaited); `BackgroundTasks.spawn` for fire-and-forget work, which it holds itself
(asyncio keeps only a weak reference to a task: one nobody holds may be collected
mid-flight) and drains on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def start_task(coro: Coroutine[Any, Any, T], name: str, *,
               awaited: bool = False) -> asyncio.Task[T]:
    """Start `coro` as task `name`; its failure is logged, unless `awaited` (the caller
    awaits it and handles its failure itself). The caller keeps the task."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    if not awaited:
        task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s failed", task.get_name(), exc_info=task.exception())


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait until they have ended."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


class BackgroundTasks:
    """Keeps a strong reference to every task it starts until the task ends.

    Shutdown is two-step: `close()` refuses new tasks, `drain(timeout_s)` waits for
    the running ones and cancels whatever is still running when the time is up.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T] | None:
        """Start `coro` as task `name`; None (and the coroutine closed) once closing."""
        if self.closing:
            coro.close()
            return None
        task = start_task(coro, name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def close(self) -> None:
        self.closing = True

    async def drain(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for running tasks, then cancel the rest; return how many."""
        self.close()
        cancelled = 0
        deadline = asyncio.get_running_loop().time() + timeout_s
        # Tasks may spawn follow-up tasks while draining (shadow -> record): loop, bounded.
        for _ in range(16):
            pending = set(self._tasks)
            if not pending:
                break
            left = deadline - asyncio.get_running_loop().time()
            if left > 0:
                await asyncio.wait(pending, timeout=left)
                continue
            for task in pending:
                task.cancel()
            cancelled += len(pending)
            await asyncio.gather(*pending, return_exceptions=True)
        if cancelled:
            log.warning("shutdown: cancelled %d background task(s) after %.1fs", cancelled,
                        timeout_s)
        return cancelled
