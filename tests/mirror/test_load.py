"""The shedding rules: the proxy's own overload, the capture worker's backlog, the probe."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from proxy.mirror.load import BUSY_WINDOW_S, LoopLoad, WorkerBacklog, overloaded


@pytest.mark.parametrize(("lag_s", "busy", "shed"), [
    (0.050, 0.9, True),   # late and busy with its own work
    (0.050, 0.1, False),  # late because other processes hold the CPUs
    (0.002, 0.9, False),  # busy, but clients are not kept waiting
    (0.010, 0.9, False),  # at the limit is not over it
    (0.050, 0.5, True),   # at the busy limit counts
])
def test_overload_needs_both_lag_and_own_work(lag_s, busy, shed):
    assert overloaded(lag_s, busy, lag_limit_s=0.01, busy_limit=0.5) is shed


def test_overload_rule_off_and_lag_only():
    assert not overloaded(1.0, 1.0, lag_limit_s=0.0, busy_limit=0.5)  # 0: never shed
    assert overloaded(0.05, 0.0, lag_limit_s=0.01, busy_limit=0.0)  # the old rule


def test_loop_load_smooths_lag_and_averages_busy_over_the_window():
    load = LoopLoad()
    load.update(0.1, cpu_s=0.02, wall_s=0.02)  # one late, busy probe
    assert load.lag_s == pytest.approx(0.03)
    assert load.busy == pytest.approx(0.02 / BUSY_WINDOW_S)
    for _ in range(200):  # a second and more of probes with the thread busy half the time
        load.update(0.0, cpu_s=0.01, wall_s=0.02)
    assert load.lag_s < 0.001
    assert load.busy == pytest.approx(0.5, abs=0.01)
    load.update(-0.001, cpu_s=0.5, wall_s=0.02)  # early wake-up, clock jitter: clamped
    assert load.lag_s >= 0.0 and load.busy <= 1.0


async def test_probe_sees_a_busy_loop_not_one_late_wake_up():
    load = LoopLoad()
    watch = asyncio.create_task(load.watch(0.005))
    await asyncio.sleep(0.05)
    assert load.lag_s < 0.01
    time.sleep(0.02)  # noqa: ASYNC251 - one late wake-up: smoothed below 0.01 s
    await asyncio.sleep(0.006)
    assert 0.0 < load.lag_s < 0.01
    for _ in range(8):  # a loop that stays busy
        time.sleep(0.03)  # noqa: ASYNC251 - blocking is the point: a busy loop
        await asyncio.sleep(0.006)
    assert load.lag_s > 0.01
    watch.cancel()


async def test_probe_counts_only_its_own_threads_cpu():
    """A fake CPU clock running at 80 % of the loop's clock: busy is CPU time over wall
    time, climbing towards 0.8 at the moving average's pace however late the probes run (a
    fake that added 4 ms a probe read 0.087 in a CI lane whose probes ran late)."""
    loop = asyncio.get_running_loop()
    load = LoopLoad()
    watch = asyncio.create_task(load.watch(0.005, cpu_clock=lambda: 0.8 * loop.time()))
    await asyncio.sleep(0.3)
    watch.cancel()
    # Each probe moves busy a share wall/BUSY_WINDOW_S of the way to 0.8, over >= 0.29 s.
    assert 0.8 * (1 - math.exp(-0.29 / BUSY_WINDOW_S)) < load.busy <= 0.8 + 1e-9
    idle = LoopLoad()
    watch = asyncio.create_task(idle.watch(0.005, cpu_clock=lambda: 1.0))
    await asyncio.sleep(0.1)
    watch.cancel()
    assert idle.busy == 0.0


def test_backlog_age_is_that_of_the_oldest_byte_not_reported_handled():
    backlog = WorkerBacklog()
    assert backlog.age_s(100.0) == 0.0 and not backlog.behind(100.0, 1.0, 1000)
    backlog.sent(10, now=100.0)
    backlog.sent(20, now=100.5)
    assert backlog.queued_bytes == 30
    assert backlog.age_s(101.2) == pytest.approx(1.2)
    assert backlog.behind(101.2, max_delay_s=1.0, max_bytes=1000)
    backlog.handled(10)  # the first message is done: the second one is the oldest
    assert backlog.age_s(101.2) == pytest.approx(0.7)
    assert not backlog.behind(101.2, max_delay_s=1.0, max_bytes=1000)
    assert backlog.behind(101.2, max_delay_s=1.0, max_bytes=10)  # too many bytes queued
    backlog.handled(30)
    assert backlog.queued_bytes == 0 and backlog.age_s(500.0) == 0.0
    backlog.sent(5, now=600.0)
    backlog.reset()  # a new worker owes nothing
    assert backlog.queued_bytes == 0 and backlog.age_s(700.0) == 0.0
