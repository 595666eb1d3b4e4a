"""The one place background tasks are created: named, referenced, drained on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

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
