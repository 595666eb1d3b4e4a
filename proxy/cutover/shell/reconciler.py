"""The I/O around the pure core: observe, advance, persist, act; one step at a time.

Runs in the sidecar proxy's event loop. Docker calls go to a worker thread
(`asyncio.to_thread`), so the client path never waits on the daemon; route changes are
compare-and-set calls on the proxy's own router; the state is written (atomically) before
the step's action, so a restart repeats at most that one idempotent action.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp

from proxy.cutover import machine
from proxy.cutover.addressing import current_url
from proxy.cutover.control import ProxyControl, RouteConflict
from proxy.cutover.driver import LABEL_CUTOVER, ContainerDriver, EngineUnavailable, NotFound
from proxy.cutover.model import Command, CutoverState
from proxy.cutover.shell.backoff import Backoff, LogThrottle
from proxy.cutover.shell.warmup import engine_identity, healthy, probe_ready
from proxy.cutover.steps import (
    Action,
    ActionFailure,
    CreateNew,
    Observation,
    RemoveContainer,
    SaveImage,
    SetRoutes,
    StartContainer,
    StopContainer,
    Wait,
)
from proxy.statefile import StateFile

log = logging.getLogger(__name__)

SECTION = "cutover"


class Reconciler:
    """Drives one cutover to its end. `deliver` queues an operator command for the next
    step (validated against the current state first); `run` steps until the phase ends."""

    def __init__(self, state: CutoverState, statefile: StateFile, control: ProxyControl,
                 driver: ContainerDriver | None, session: aiohttp.ClientSession,
                 tick_s: float = 1.0, clock: Callable[[], float] = time.time,
                 on_state: Callable[[CutoverState], None] | None = None) -> None:
        self.state = state
        self._on_state = on_state
        self._statefile = statefile
        self._control = control
        self._driver = driver
        self._session = session
        self._tick_s = tick_s
        self._clock = clock
        self._mail: Command | None = None
        self._wake = asyncio.Event()
        self._failure: ActionFailure | None = None
        self._saved_bytes: int | None = None
        # A step the state file did not take is retried after a growing delay, even with
        # a command waiting (it must be persisted before it is acted on).
        self._unwritten = Backoff(first_s=tick_s, max_s=max(30.0, tick_s))
        self._quiet = LogThrottle(log)
        self._write_failed = False

    def deliver(self, cmd: Command) -> CutoverState:
        """The state as it will be with `cmd` pending; machine.CommandRefused if it does
        not apply, or when a different command delivered before it is still pending."""
        machine.refuse_over_pending(self.state.id, self._mail, cmd)
        pending = machine.command(self.state, cmd)
        self._mail = cmd
        self._wake.set()
        return pending

    @property
    def mail(self) -> Command | None:
        """A delivered command the next step has not taken yet."""
        return self._mail

    @property
    def busy(self) -> bool:
        return not self.state.phase.terminal or self._mail is not None

    async def run(self) -> None:
        while self.busy:
            phase = self.state.phase
            self._wake.clear()  # a wake-up during the step is not lost: the sleep returns
            action = await self.step()
            if self._write_failed:
                await asyncio.sleep(self._unwritten.next_delay())
                continue
            self._unwritten.reset()
            if isinstance(action, Wait) and self.state.phase is phase:
                await self._sleep()
        log.info("cutover %s ended: %s", self.state.id, self.state.phase.value)

    async def step(self) -> Action:
        """Observe, advance, persist, then perform the one action asked for."""
        state, mail = self.state, self._mail
        if mail is not None:
            try:
                state = machine.command(state, mail)
            except machine.CommandRefused as exc:
                state = replace(state, note=str(exc))
        obs = await self._observe(state)
        nxt, action = machine.advance(state, obs, self._clock())
        self._write_failed = False
        if nxt != self.state:
            try:
                await asyncio.to_thread(self._statefile.put, SECTION, nxt.to_json())
            except OSError as exc:  # acting on a step the file does not hold could repeat
                self._write_failed = True
                self._quiet.log(logging.ERROR, "state file", "cutover %s: state file not "
                                "written (retried with back-off): %s", nxt.id, exc)
                self.state = replace(self.state, note=f"state file not written: {exc}")
                return Wait()
            if nxt.phase is not self.state.phase:
                log.info("cutover %s: %s -> %s (%s)", nxt.id, self.state.phase.value,
                         nxt.phase.value, nxt.history[-1].reason)
        changed = nxt != self.state  # a phase, or the gate's estimate within one (metrics)
        self.state = nxt
        if changed and self._on_state is not None:  # the service reports the first state
            self._on_state(nxt)
        if self._mail is mail:  # taken; one delivered meanwhile waits for the next step
            self._mail = None
        self._failure, self._saved_bytes = None, None
        if not isinstance(action, Wait):
            await self._perform(action)
        return action

    async def _sleep(self) -> None:
        if self._mail is not None:
            return
        try:
            await asyncio.wait_for(self._wake.wait(), self._tick_s)
        except asyncio.TimeoutError:
            pass

    async def confirm_peer(self, url: str) -> str | None:
        """None when a connection established to `url` before this call reaches the
        container the cutover means, else why not. Only old's address is checked: after
        the promotion old is the shadow; before it, its address is the primary's, which
        is never asked. Old still running at that address now means it held the address
        when the connection was made (Docker frees an IP only once its holder is gone).
        A refusal wakes the next step, which stops mirroring to old."""
        state, driver = self.state, self._driver
        old = state.old
        if state.phase.terminal or old.container_id is None or url != old.url or (
                driver is None):
            return None
        try:
            info = await asyncio.to_thread(driver.inspect, old.container_id)
        except (RuntimeError, OSError) as exc:
            return f"the old container {old.name} could not be checked: {exc}"
        if info.state != "running":
            why = f"the old container {old.name} is {info.state}"
        elif (now := current_url(old.url, old.network, info)) != old.url:
            why = f"the old container {old.name} is now at {now}"
        else:
            return None
        self._wake.set()
        return f"{why}: {url} may be held by another container"

    async def _observe(self, state: CutoverState) -> Observation:
        wanted = machine.needs(state)
        seen: set[str] = set()
        problems: list[str] = []
        found: dict[str, Any] = {}

        async def look(probe: str, call: Callable[[], Any]) -> None:
            try:
                result = call()
                found[probe] = await result if asyncio.iscoroutine(result) else result
            except NotFound:
                found[probe] = None
            except (RuntimeError, OSError, ValueError, asyncio.TimeoutError) as exc:
                # a probe that fails says nothing (not in `seen`); the step waits
                problems.append(f"{probe}: {exc}")
                return
            seen.add(probe)

        control, driver = self._control, self._driver
        if "routes" in wanted:
            await look("routes", control.routes)
        if "inflight" in wanted:
            await look("inflight", lambda: dict(control.inflight()))
        if "gate" in wanted and state.new is not None:
            window = state.evidence
            assert window is not None
            await look("gate", lambda: control.gate(window))
        old_id = state.old.container_id
        if driver is not None and "old" in wanted and old_id:
            await look("old", lambda: asyncio.to_thread(driver.inspect, old_id))
        if driver is not None and "new" in wanted:
            await look("new", lambda: asyncio.to_thread(driver.find,
                                                        f"label={LABEL_CUTOVER}={state.id}"))
        new_info = found.get("new")
        if driver is not None and new_info is not None:
            if state.new is None:
                await look("new_url", lambda: asyncio.to_thread(driver.url_for, new_info,
                                                                state.old.url))
            if "new_logs" in wanted:
                await look("new_logs", lambda: asyncio.to_thread(driver.logs_tail, new_info.id))
        running = "new" not in seen or (new_info is not None and new_info.state == "running")
        new_url = state.new.url if state.new is not None else None
        if "warmup" in wanted and new_url is not None and running:
            await look("warmup", lambda: probe_ready(self._session, new_url,
                                                     state.served_models))
        old_info = found.get("old")
        old_down = "old" in seen and (old_info is None or old_info.state != "running")
        # Where old is now: its address re-read from the container (by id), never the one
        # recorded, which another container may hold after a restart.
        old_url: str | None = state.old.url
        if "old" in seen:
            old_url = None if old_down or old_info is None else current_url(
                state.old.url, state.old.network, old_info)
        if "old_health" in wanted and old_url is not None:
            # A stopped container's address has no host behind it: a probe would hang
            # for its whole timeout before the rollback could start the container.
            await look("old_health", lambda: healthy(self._session, old_url))
        if "new_health" in wanted and state.new is not None:
            new_base = state.new.url
            await look("new_health", lambda: healthy(self._session, new_base))
        if "old_identity" in wanted and old_url is not None and found.get("old_health"):
            await look("old_identity", lambda: engine_identity(self._session, old_url))
        return Observation(
            seen=frozenset(seen), routes=found.get("routes"),
            inflight=found.get("inflight") or {}, gate=found.get("gate"),
            old=found.get("old"), new=new_info, new_url=found.get("new_url"),
            new_logs=found.get("new_logs"), warmup=found.get("warmup"),
            old_healthy=bool(found.get("old_health")), old_url=old_url,
            old_identity=found.get("old_identity"), failure=self._failure,
            new_healthy=found.get("new_health") if "new_health" in seen else None,
            saved_bytes=self._saved_bytes, problems=tuple(problems))

    async def _perform(self, action: Action) -> None:
        state, driver = self.state, self._driver
        try:
            if isinstance(action, SetRoutes):
                self._control.set_routes(action.primary, action.shadow, action.baseline,
                                         expect_version=action.expect_version)
                return
            if driver is None:
                raise EngineUnavailable(f"{type(action).__name__} needs a container driver "
                                        "(start the proxy with --driver docker)")
            if isinstance(action, SaveImage):
                self._saved_bytes = await asyncio.to_thread(driver.save_image, action.image,
                                                            action.path)
            elif isinstance(action, CreateNew):
                assert state.old.container_id is not None
                old = await asyncio.to_thread(driver.inspect, state.old.container_id)
                await asyncio.to_thread(driver.create_like, old, action.plan)
            elif isinstance(action, StartContainer):
                await asyncio.to_thread(driver.start, action.container_id)
            elif isinstance(action, StopContainer):
                await asyncio.to_thread(driver.stop, action.container_id, action.grace_s)
            elif isinstance(action, RemoveContainer):
                await asyncio.to_thread(driver.remove, action.container_id)
        except (RouteConflict, EngineUnavailable) as exc:
            self._failure = ActionFailure(type(action).__name__, str(exc), transient=True)
        except Exception as exc:  # the machine decides what a failed action means
            if not isinstance(exc, (RuntimeError, OSError, ValueError)):
                log.warning("cutover %s: %s failed", state.id, type(action).__name__,
                            exc_info=True)
            else:
                self._quiet.log(logging.WARNING, type(action).__name__, "cutover %s: %s "
                                "failed: %s", state.id, type(action).__name__, exc)
            self._failure = ActionFailure(type(action).__name__, str(exc),
                                          transient=isinstance(action, SetRoutes))
