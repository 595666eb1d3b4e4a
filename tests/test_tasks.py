"""Background tasks: referenced while running, drained then cancelled on shutdown, and
created nowhere else in the package."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import proxy
from proxy.tasks import BackgroundTasks, start_task


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


async def test_start_task_logs_a_failure(caplog):
    async def fail() -> None:
        raise RuntimeError("boom")

    task = start_task(fail(), "failing-helper")
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    assert "background task failing-helper failed" in caplog.text


def _task_calls(tree: ast.AST) -> list[int]:
    """Lines that call create_task or ensure_future (as a method or a bare name)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else None
        if name in {"create_task", "ensure_future"}:
            lines.append(node.lineno)
    return lines


def test_tasks_are_created_only_through_proxy_tasks():
    package = Path(proxy.__file__).parent
    own = package / "tasks.py"
    assert _task_calls(ast.parse(own.read_text())), "the scan must see tasks.py's own call"
    offenders = [f"{path.relative_to(package.parent)}:{line}"
                 for path in sorted(package.rglob("*.py")) if path != own
                 for line in _task_calls(ast.parse(path.read_text()))]
    assert offenders == [], "create tasks with proxy.tasks (start_task or BackgroundTasks)"


def test_the_scan_finds_every_spelling():
    source = ("asyncio.create_task(a())\nloop.create_task(b())\nasyncio.ensure_future(c())\n"
              "create_task(d())\nx = asyncio.get_running_loop().create_task(e())\n")
    assert _task_calls(ast.parse(source)) == [1, 2, 3, 4, 5]
