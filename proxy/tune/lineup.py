"""Container mode's running candidates: which start (on which GPU set), which are done
and removed, and the winner made again when it had made way. The race (pure) decides;
this performs, through the cutover's container driver and `Launcher`.

Every candidate container is listed in `made` (the tune state's "containers", persisted)
by name before it is created, so a restart, an abort and the race's end can remove it
even when the proxy stopped between create and record.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from proxy.cutover.driver import ContainerDriver, DriverError
from proxy.tasks import start_task
from proxy.tune.containers import GpuSlots
from proxy.tune.launch import Launcher, LaunchFailed
from proxy.tune.race import RETIRED, Race
from proxy.tune.spec import TuneSpec

# The candidates' mirror pools connections by URL, and Docker hands a removed container's
# IP to the next one: a candidate at an address freed less than this ago waits, so that
# no kept-alive connection to its predecessor (reused only when idle under the mirror's
# MAX_IDLE_S, 4 s) meets it mid-request and counts as its error.
FREED_ADDRESS_WAIT_S = 5.0
Made = dict[str, dict[str, Any]]  # candidate -> container, id, url, gpus, removed...


class Lineup:
    """The candidate containers of one tune. Without a launcher (a proxy restarted with
    a tune's state on disk) it can only remove what `made` lists."""

    def __init__(self, driver: ContainerDriver | None, made: Made, note: Callable[[str], None],
                 persist: Callable[[], None], launcher: Launcher | None = None,
                 slots: GpuSlots | None = None) -> None:
        self._driver = driver
        self.made = made
        self._note = note
        self._persist = persist
        self._launcher = launcher
        self._slots = slots
        self._launches: dict[str, asyncio.Task[None]] = {}
        self._freed_at: dict[str, float] = {}  # URL -> when its container was removed

    async def tend(self, race: Race, spec: TuneSpec, elapsed_s: Callable[[], float]) -> None:
        """Remove the containers of candidates that are done; start the next ones."""
        if self._launcher is None or self._slots is None:
            return
        for name, lane in race.lanes.items():
            if lane.state in RETIRED and name in self.made and \
                    not self.made[name].get("removed"):
                await self.remove(name)
        # a retired candidate whose removal failed keeps its place (and GPUs) until a
        # later tend removes it: the next one waits rather than share its GPUs
        for name in race.begin_waiting(self._slots.free_places):
            gpus = self._slots.take(name)
            self._launches[name] = start_task(self._launch(race, spec, name, gpus, elapsed_s),
                                              f"tune-{self._launcher.tune_id}-{name}")

    async def _launch(self, race: Race, spec: TuneSpec, name: str,
                      gpus: tuple[str, ...] | None, elapsed_s: Callable[[], float]) -> None:
        launcher = self._launcher
        assert launcher is not None
        index = [c.name for c in spec.candidates].index(name)
        extra = spec.candidates[index].extra
        assert extra is not None
        container = launcher.name_of(index, name)
        self.made[name] = {"container": container,
                           "gpus": list(gpus) if gpus is not None else None}
        self._persist()  # listed before it exists: a restart removes it by name
        self._note(f"{name}: starting container {container}"
                   + (f" on GPUs {','.join(gpus)}" if gpus else ""))
        try:
            launched = await launcher.start(index, name, extra, gpus)
        except LaunchFailed as exc:
            race.fail(name, str(exc))
            self._note(f"{name} failed: {exc}")
            return
        freed = self._freed_at.get(launched.url, -math.inf)
        wait_s = FREED_ADDRESS_WAIT_S - (time.monotonic() - freed)
        if wait_s > 0:
            self._note(f"{name}: {launched.url} was an earlier candidate's; racing in "
                       f"{wait_s:.1f}s, when no connection to that one is reused")
            await asyncio.sleep(wait_s)
        self.made[name].update(id=launched.id, url=launched.url,
                               vllm_version=launched.vllm_version)
        race.admit(name, launched.url, elapsed_s())
        verb = "is ready" if race.over else "races"
        self._note(f"{name} {verb} at {launched.url} (container {launched.container}, "
                   f"/version {launched.vllm_version})")

    async def winner_url(self, race: Race, spec: TuneSpec, name: str,
                         elapsed_s: Callable[[], float]) -> str:
        """The winner's URL, its container made again if it made way for others
        (LaunchFailed when that fails)."""
        lane = race.lanes[name]
        made = self.made.get(name)
        if made is None:  # adopt mode
            return lane.url
        if made.get("removed"):
            assert self._slots is not None
            self._note(f"starting {name} again to promote it (it made way for later "
                       "candidates)")
            lane.state = "starting"  # as the launch expects; the race is over already
            await self._launch(race, spec, name, self._slots.take(name), elapsed_s)
            if lane.state == "failed":
                raise LaunchFailed(f"{name} won but could not be started again: {lane.reason}")
            lane.state, lane.reason = "winner", race.ending
        lane.url = str(self.made[name]["url"])
        return lane.url

    async def stop_launches(self) -> None:
        """Cancel the launches under way; wait for any container being created."""
        for launch in self._launches.values():
            launch.cancel()
        await asyncio.gather(*self._launches.values(), return_exceptions=True)
        self._launches = {}
        if self._launcher is not None:
            await self._launcher.settle()

    async def remove_all(self, keep: str | None = None) -> None:
        for name, made in list(self.made.items()):
            if name != keep and not made.get("removed"):
                await self.remove(name)

    async def remove(self, name: str) -> None:
        """`docker rm -f` by name; the GPU set goes back; a failure is noted and left for
        the next end to try again."""
        made = self.made[name]
        if self._driver is None:
            return
        try:
            await asyncio.to_thread(self._driver.remove, made["container"])
        except DriverError as exc:
            self._note(f"{name}: removing container {made['container']} failed: {exc}")
            return
        made["removed"] = True
        if made.get("url"):
            self._freed_at[str(made["url"])] = time.monotonic()
        if self._slots is not None:
            self._slots.free(name)
        self._note(f"{name}: container {made['container']} removed")
