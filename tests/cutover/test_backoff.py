"""A state file that cannot be written (disk full) with a command pending: the cutover
retries with back-off and logs once per interval, never a busy loop; `cutover start` on a
full disk is a clear 503, not a bare 500."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from proxy.cutover.control import GateView
from proxy.cutover.model import CutoverSpec, Phase
from proxy.cutover.shell.backoff import Backoff, LogThrottle
from proxy.cutover.shell.service import StartRefused
from proxy.statefile import StateFile
from tests.cutover.test_admin import AUTH, _api
from tests.cutover.world import FAST, World, ended, until


class DiskFull:
    """Stands in for `write_text_atomic` while `full`; counts the attempts."""

    def __init__(self, real: Any) -> None:
        self.real, self.full, self.attempts = real, False, 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.attempts += 1
        if self.full:
            raise OSError(28, "No space left on device")
        self.real(*args, **kwargs)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> DiskFull:
    import proxy.statefile

    fake = DiskFull(proxy.statefile.write_text_atomic)
    monkeypatch.setattr(proxy.statefile, "write_text_atomic", fake)
    return fake


async def test_a_pending_abort_on_a_full_disk_backs_off(world: World, disk: DiskFull,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    world.control.judge = lambda w: GateView("inconclusive", ("0 < 10",), 0, 10)
    service = await world.service()
    await service.start(CutoverSpec(**{**FAST, "auto_promote": False}))
    await until(lambda: service.state is not None and service.state.phase is Phase.SHADOWING)
    disk.full, disk.attempts = True, 0
    caplog.set_level(logging.ERROR, "proxy.cutover.shell.reconciler")
    service.command("abort")
    await asyncio.sleep(1.0)
    errors = [r for r in caplog.records if "state file not written" in r.getMessage()]
    # tick 5 ms doubling: about 8 attempts in a second (a busy loop made thousands)
    assert 1 <= disk.attempts <= 12 and len(errors) == 1, (disk.attempts, len(errors))
    assert service.state is not None and service.state.phase is Phase.SHADOWING
    assert "No space left" in (service.status().get("note") or "")
    disk.full = False
    end = await ended(service)
    assert end.phase is Phase.ABORTED and world.persisted().phase is Phase.ABORTED


async def test_start_on_a_full_disk_is_a_clear_503(world: World, disk: DiskFull,
                                                   aiohttp_client: Any) -> None:
    disk.full = True
    service = await world.service()
    with pytest.raises(StartRefused) as info:
        await service.start(CutoverSpec(**FAST))
    assert info.value.status == 503 and "No space left" in str(info.value)
    api = await _api(aiohttp_client, service)
    resp = await api.post("/admin/cutover", json=FAST, headers=AUTH)
    body = await resp.json()
    assert resp.status == 503 and "state file cannot be written" in body["error"]["message"]
    assert service.state is None and not world.driver.named("create_like")
    assert StateFile(world.state_path).get("cutover") is None


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.5, max_s=3.0)
    assert [b.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    b.reset()
    assert b.next_delay() == 0.5


def test_log_throttle_says_how_many_it_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    quiet = LogThrottle(logging.getLogger("t"), interval_s=10.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, "t")
    sent = [quiet.log(logging.ERROR, "disk", "failed: %s", "x") for _ in range(50)]
    assert sent.count(True) == 1 and quiet.log(logging.ERROR, "other", "b")
    now[0] = 11.0
    assert quiet.log(logging.ERROR, "disk", "failed: %s", "x")
    assert caplog.messages[-1] == "failed: x (49 more like it in the last 11 s)"
