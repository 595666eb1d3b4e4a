"""The cutover as the sidecar runs it: start (checked before anything changes), operator
commands, status, and resuming a persisted cutover when the proxy starts.

One cutover at a time per proxy. `open()` reads the state file's "cutover" section and
resumes a cutover that had not ended (StateFileError, naming the field, for one it cannot
read); `close()` stops stepping (the state stays on disk).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web

from proxy.cutover import machine
from proxy.cutover.addressing import network_of, reaches
from proxy.cutover.control import ProxyControl
from proxy.cutover.driver import (
    Conflict,
    ContainerDriver,
    DriverError,
    NotFound,
    http_status,
)
from proxy.cutover.model import Command, CutoverSpec, CutoverState, Endpoint, StateError
from proxy.cutover.shell.reconciler import SECTION, Reconciler
from proxy.cutover.shell.warmup import ProbeError, not_listening, served_models, vllm_version
from proxy.cutover.spec import DEFAULT_SHUTDOWN_GRACE_S, grace_from_command
from proxy.cutover.status import status_json
from proxy.statefile import StateFile, StateFileError
from proxy.tasks import start_task
from proxy.urls import role_conflicts

log = logging.getLogger(__name__)

NO_DRIVER = ("this proxy runs without a container driver: start it with --driver docker "
             "and the Docker socket mounted, or adopt a running backend with new_url")


class StartRefused(RuntimeError):
    """A start request that changed nothing; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class MeaninglessSetup(ValueError):
    """Roles that make the evidence meaningless (new is old, the baseline is new)."""


class CutoverService:
    """Owns the cutover of one proxy: wire it with `CUTOVER_KEY`, `open()` it at start-up
    and `close()` it at shutdown; it must share the router's StateFile instance (each
    instance rewrites the whole file with the sections it holds)."""

    def __init__(self, statefile: StateFile, control: ProxyControl,
                 driver: ContainerDriver | None, tick_s: float = 1.0,
                 clock: Callable[[], float] = time.time,
                 on_state: Callable[[CutoverState], None] | None = None) -> None:
        self._on_state = on_state
        self._statefile = statefile
        self._control = control
        self.driver = driver
        self._tick_s = tick_s
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._reconciler: Reconciler | None = None
        self._task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self.warnings: tuple[str, ...] = ()  # about the setup of the last start

    @property
    def state(self) -> CutoverState | None:
        return self._reconciler.state if self._reconciler else None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession()
        data = self._statefile.get(SECTION)
        if data is None:
            return
        try:
            state = CutoverState.from_json(data)
        except StateError as exc:
            # Not resumable: the start stops (the CLI exits 2). Serving on the routes alone
            # while containers of a lost cutover may run, or starting another over it,
            # could fight the lost one; the operator decides.
            raise StateFileError(f"state file {self._statefile.path!r}: the persisted "
                                 f"cutover cannot be read: {exc}") from exc
        self._reconciler = self._make(state)
        if not state.phase.terminal:
            log.info("resuming cutover %s in phase %s", state.id, state.phase.value)
            self._ensure_running()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._session is not None:
            await self._session.close()

    async def wait(self) -> CutoverState | None:
        """Until the running cutover has ended (for tests and `--wait` callers)."""
        if self._task is not None:
            await asyncio.shield(self._task)
        return self.state

    def status(self) -> dict[str, Any]:
        try:
            routes = self._control.routes()
        except RuntimeError:  # status must answer even when the router cannot
            routes = None
        data = status_json(self.state, routes, self._clock())
        if self.warnings:
            data["warnings"] = list(self.warnings)
        if self._reconciler is not None and self._reconciler.mail is not None:
            data.update(pending=self._reconciler.mail, terminal=False)
        return data

    async def confirm_peer(self, url: str) -> str | None:
        """Whether a new mirror connection to `url` may carry prompts (`proxy.mirror.peers`):
        None, or why not. Only the running cutover's containers are checked."""
        reconciler = self._reconciler
        return None if reconciler is None else await reconciler.confirm_peer(url)

    def command(self, cmd: Command) -> CutoverState:
        """Queue `cmd` (machine.CommandRefused when it does not apply)."""
        if self._reconciler is None:
            raise machine.CommandRefused("no cutover has run on this proxy")
        pending = self._reconciler.deliver(cmd)
        self._ensure_running()
        return pending

    async def start(self, spec: CutoverSpec) -> CutoverState:
        """Check everything, persist the first state, start stepping; StartRefused (and
        nothing changed) otherwise."""
        async with self._start_lock:
            try:
                machine.ensure_can_begin(self.state)
            except machine.CutoverRunning as exc:
                raise StartRefused(409, str(exc)) from exc
            if spec.needs_driver and self.driver is None:
                raise StartRefused(501, NO_DRIVER)
            try:
                state = await self._first_state(spec)
            except ProbeError as exc:
                raise StartRefused(502, str(exc)) from exc
            except MeaninglessSetup as exc:
                raise StartRefused(400, str(exc)) from exc
            except DriverError as exc:
                raise StartRefused(http_status(exc), str(exc)) from exc
            try:
                await asyncio.to_thread(self._statefile.put, SECTION, state.to_json())
            except OSError as exc:  # disk full, read-only: nothing was started
                raise StartRefused(503, f"cutover not started: the state file cannot be "
                                        f"written: {exc}") from exc
            self._reconciler = self._make(state)
            self._ensure_running()
            log.info("cutover %s started: %s", state.id, state.history[0].reason)
            return state

    async def _first_state(self, spec: CutoverSpec) -> CutoverState:
        assert self._session is not None, "open() first"
        routes = self._control.routes()
        old_url = spec.old_url or routes.primary
        if old_url != routes.primary:
            raise Conflict(f"the proxy's primary is {routes.primary!r}, not old_url "
                           f"{old_url!r}: a cutover replaces the backend that serves")
        errors, warnings = await asyncio.to_thread(
            role_conflicts, old_url, spec.new_url, spec.baseline_url or routes.baseline,
            ("primary (old)", "new_url", "baseline_url"))
        if errors:  # nothing the cutover would measure could mean anything
            raise MeaninglessSetup("; ".join(errors))
        for warning in warnings:
            log.warning("cutover start: %s", warning)
        self.warnings = tuple(warnings)
        old = Endpoint(url=old_url)
        grace = spec.shutdown_grace_s
        driver = self.driver
        if spec.old is not None and driver is not None:
            info = await asyncio.to_thread(driver.find, spec.old)
            if info.state != "running":
                raise Conflict(f"the old container {info.name} is {info.state}, not running")
            old = replace(old, container_id=info.id, name=info.name, image=info.image,
                          network=network_of(info, old_url))
            if spec.new_url is not None and reaches(info, spec.new_url):
                raise MeaninglessSetup(f"the new_url {spec.new_url!r} reaches the old "
                                       f"container {info.name} ({info.id[:12]}) itself")
            if grace is None:
                grace = grace_from_command(info.entrypoint + info.command)
            if spec.new_image is not None:
                if not await asyncio.to_thread(driver.image_exists, spec.new_image):
                    raise NotFound(f"image {spec.new_image!r} is not on this host: build or "
                                   "pull it first")
                if spec.new_gpus is None and info.gpus:
                    raise Conflict(f"the old container holds GPUs {list(info.gpus)!r}; give "
                                   "new_gpus (--new-gpus) with free devices for the new one")
                if spec.new_gpus:
                    await asyncio.to_thread(driver.check_gpus, spec.new_gpus)
        for flag, url in (("--new-url", spec.new_url), ("--baseline-url", spec.baseline_url)):
            if url is not None and (why := await not_listening(self._session, url)):
                raise ProbeError(f"{flag}: {why}; start that engine first (a cutover "
                                 "waits for an engine that answers to be ready, not for "
                                 "one that is not there)")
        try:
            names = ((spec.served_model_name,) if spec.served_model_name
                     else await served_models(self._session, old_url))
        except ProbeError as exc:
            raise ProbeError(f"the old backend {old_url} did not list its models ({exc}); "
                             "give served_model_name") from exc
        old = replace(old, vllm_version=await vllm_version(self._session, old_url))
        return machine.begin(spec, secrets.token_hex(4), old, self._clock(), self.state,
                             served_models=names,
                             baseline_url=spec.baseline_url or routes.baseline,
                             operator_routes=(routes.shadow, routes.baseline),
                             shutdown_grace_s=grace if grace is not None
                             else DEFAULT_SHUTDOWN_GRACE_S)

    def _make(self, state: CutoverState) -> Reconciler:
        assert self._session is not None, "open() first"
        if self._on_state is not None:
            self._on_state(state)
        return Reconciler(state, self._statefile, self._control, self.driver, self._session,
                          self._tick_s, self._clock, self._on_state)

    def _ensure_running(self) -> None:
        if self._task is not None and not self._task.done():
            return
        reconciler = self._reconciler
        assert reconciler is not None
        self._task = start_task(reconciler.run(), f"cutover-{reconciler.state.id}")


CUTOVER_KEY = web.AppKey("cutover", CutoverService)
