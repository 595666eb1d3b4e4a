"""Running a coroutine on uvloop when it is installed (the "fast" extra), else asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _runner() -> Callable[[Coroutine[Any, Any, T]], T]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run_fast(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` or `uvloop.run`. The choice is made first and the coroutine run
    outside any `except` block: run inside one, every exception raised by the program
    would carry "No module named 'uvloop'" as its context in tracebacks."""
    return _runner()(main)
