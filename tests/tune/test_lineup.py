"""The container lineup's places: a candidate that failed keeps its place (and GPUs) until
its container is really removed; the next one waits instead of the whole tune failing
(seen on real vLLM CPU engines: a removal that failed once ended a tune with "no free
place")."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from proxy.cutover.driver import ContainerDriver, DriverError
from proxy.gate.verdict import GateCriteria
from proxy.tune.containers import Extra, GpuSlots
from proxy.tune.launch import Launched, Launcher, LaunchFailed
from proxy.tune.lineup import Lineup
from proxy.tune.race import Race, RaceCriteria
from proxy.tune.spec import Candidate, TuneSpec

CRITERIA = RaceCriteria(gate=GateCriteria())


class Driver:
    """Removes by name; the first removal of `flaky` fails."""

    def __init__(self, flaky: str) -> None:
        self.flaky, self.removed, self.failures = flaky, [], 0

    def remove(self, ref: str) -> None:
        if ref == self.flaky and self.failures == 0:
            self.failures += 1
            raise DriverError(f"removing container {ref!r}: timed out")
        self.removed.append(ref)


class FakeLauncher:
    tune_id = "t1"

    def __init__(self) -> None:
        self.started: list[tuple[str, Any]] = []

    def name_of(self, index: int, candidate: str) -> str:
        return f"old-tune-t1-{index}-{candidate}"

    async def start(self, index: int, candidate: str, extra: Extra,
                    gpus: tuple[str, ...] | None) -> Launched:
        self.started.append((candidate, gpus))
        if candidate == "a":
            raise LaunchFailed("not ready within 900s")
        return Launched(self.name_of(index, candidate), f"id-{candidate}",
                        f"http://{candidate}:8000", "0.32.0")

    async def settle(self) -> None:
        return None


async def _let_launches_run() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_failed_candidate_whose_removal_fails_keeps_its_gpus_and_the_next_waits() -> None:
    async def scenario() -> None:
        spec = TuneSpec(candidates=tuple(Candidate(n, extra=Extra(("--x",)))
                                         for n in ("a", "b")), old="old")
        race = Race({"a": "", "b": ""}, CRITERIA, parallel=1)
        driver, launcher = Driver("old-tune-t1-0-a"), FakeLauncher()
        lineup = Lineup(cast(ContainerDriver, driver), {}, lambda _: None, lambda: None,
                        cast(Launcher, launcher), GpuSlots((("0",),), 1))
        await lineup.tend(race, spec, lambda: 0.0)
        await _let_launches_run()  # a's launch runs and fails
        assert race.lanes["a"].state == "failed"
        await lineup.tend(race, spec, lambda: 1.0)  # a's removal fails: b must wait
        assert race.lanes["b"].state == "waiting"
        assert [name for name, _ in launcher.started] == ["a"]
        await lineup.tend(race, spec, lambda: 2.0)  # removed now: b starts on GPU 0
        await _let_launches_run()
        assert driver.removed == ["old-tune-t1-0-a"]
        assert launcher.started == [("a", ("0",)), ("b", ("0",))]
        assert race.lanes["b"].state == "racing"

    asyncio.run(scenario())


def test_begin_waiting_takes_no_more_than_the_room_given() -> None:
    race = Race({"a": "", "b": "", "c": ""}, CRITERIA, parallel=2)
    assert race.begin_waiting(1) == ["a"]
    assert race.begin_waiting(0) == []
    assert race.begin_waiting(5) == ["b"]  # the race's own places bound it too
