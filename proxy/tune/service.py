"""The tune as the sidecar runs it: start (checked before anything changes), the race loop,
the promotion through the normal cutover, abort, status, and a restart that ends it cleanly.

The proxy mirrors each sampled request to every candidate still racing
(`proxy.mirror.candidates`) and hands each candidate's record to `observe`; once a second
the loop asks the race to judge (`proxy.tune.race`). With `promote: best` the winner then
becomes the new backend of a cutover in adopt mode (`CutoverService.start`: the gate
again on its own, promotion, post-promotion watch, rollback as any cutover), and the tune
is done when that cutover is. Only the race's summary is persisted (section "tune"): the
records live in memory, so a proxy restarted mid-race ends the race as aborted, old still
serving; one restarted while promoting follows the resumed cutover.

Container mode (`spec.old`): each candidate's container is made from the old one's
configuration by the cutover's driver, `parallel` at a time on their GPU sets; the race
says which start and which are done, `proxy.tune.lineup` starts, proves
(`proxy.tune.launch`) and removes them. An abort, the race's end and a restart remove
every candidate container but a winner being promoted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import aiohttp
from aiohttp import web

from proxy.compare.types import ExchangeRecord
from proxy.credentials import redact_argv, redact_env, without_credentials
from proxy.cutover.addressing import reaches
from proxy.cutover.control import ProxyControl
from proxy.cutover.driver import (
    Conflict,
    ContainerInfo,
    DriverError,
    NotFound,
    http_status,
)
from proxy.cutover.shell.service import CutoverService, StartRefused
from proxy.cutover.shell.warmup import ProbeError, served_models, vllm_version
from proxy.gate.verdict import GateCriteria
from proxy.statefile import StateFile
from proxy.tasks import start_task
from proxy.tune.containers import GpuSlots
from proxy.tune.launch import Launcher, LaunchFailed, OldEngine
from proxy.tune.lineup import Lineup
from proxy.tune.race import Race
from proxy.tune.spec import TuneSpec
from proxy.urls import role_conflicts

log = logging.getLogger(__name__)

SECTION = "tune"
TunePhase = Literal["racing", "promoting", "done", "aborted", "failed"]
TERMINAL: frozenset[str] = frozenset({"done", "aborted", "failed"})
PROBE_TIMEOUT_S = 10.0
DEFAULT_WARMUP_TIMEOUT_S = 900.0
NO_DRIVER = ("this proxy runs without a container driver: start it with --driver docker "
             "and the Docker socket mounted, or race candidates that already run "
             "(--candidate-url)")


class TuneRefused(RuntimeError):
    """A start or a command that changed nothing; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TuneService:
    """Owns the tune of one proxy: `open()` at start-up, `close()` at shutdown; shares the
    router's StateFile and the proxy's cutover service."""

    def __init__(self, statefile: StateFile, control: ProxyControl, cutover: CutoverService,
                 base_criteria: GateCriteria, tick_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._statefile = statefile
        self._control = control
        self._cutover = cutover
        self.base_criteria = base_criteria
        self._tick_s = tick_s
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.race: Race | None = None
        # Each candidate's cutoff on start times (`Mirror.judged_until` of the candidates'
        # mirror, which sets it): the race judges no record while an earlier one is out.
        self.judged_until: Callable[[str], float] = lambda url: math.inf
        self.spec: TuneSpec | None = None
        self.state: dict[str, Any] | None = None  # what status shows and the file keeps
        self._containers: Lineup | None = None  # container mode's candidates

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S))
        saved = self._statefile.get(SECTION)
        if not isinstance(saved, dict) or saved.get("phase") in TERMINAL:
            self.state = saved if isinstance(saved, dict) else None
            return
        self.state = saved
        if saved.get("phase") != "promoting":
            await self._lineup().remove_all()
        if saved.get("phase") == "promoting":
            log.info("tune %s: following the resumed cutover to %s", saved.get("id"),
                     saved.get("winner"))
            self._task = start_task(self._follow_promotion(), f"tune-{saved.get('id')}")
            return
        self._end("aborted", "the proxy restarted during the race: the race's evidence was "
                             "in memory, so it ended; old kept serving")

    async def close(self) -> None:
        """Stops stepping; candidate containers stay until the next start removes them."""
        if self._containers is not None:
            await self._containers.stop_launches()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._session is not None:
            await self._session.close()

    # -- what the mirror asks on the client path (cheap, no await) --

    def racing(self) -> Mapping[str, str]:
        """Name -> URL of the candidates to mirror to now (empty when no race runs)."""
        race = self.race
        if race is None or race.over or self.state is None or self.state["phase"] != "racing":
            return {}
        return race.racing()

    @property
    def sample_rate(self) -> float:
        return self.spec.sample_rate if self.spec is not None else 0.0

    def observe(self, name: str, number: int, record: ExchangeRecord) -> None:
        if self.race is not None:
            self.race.observe(name, number, record)

    # -- start, abort, status --

    async def start(self, spec: TuneSpec) -> dict[str, Any]:
        async with self._lock:
            if self.state is not None and self.state["phase"] not in TERMINAL:
                raise TuneRefused(409, f"tune {self.state['id']} is {self.state['phase']}: "
                                       "abort it first")
            cutover = self._cutover.state
            if cutover is not None and not cutover.phase.terminal:
                raise TuneRefused(409, f"cutover {cutover.id} is {cutover.phase.value}: a tune "
                                       "starts only when no cutover runs")
            if spec.containers and self._cutover.driver is None:
                raise TuneRefused(501, NO_DRIVER)
            old_url = self._control.routes().primary  # as configured: credentials kept
            for candidate in spec.candidates:
                if not candidate.url:
                    continue
                errors, _ = role_conflicts(old_url, candidate.url, None,
                                           ("primary (old)", f"candidate {candidate.name}",
                                            "baseline"))
                if errors:
                    raise TuneRefused(400, "; ".join(errors))
            old_models = await self._old_models(spec, old_url)
            tune_id = secrets.token_hex(4)
            old_info, self._containers, launcher = None, None, None
            if spec.containers:
                old_info, launcher = await self._prepare_containers(spec, tune_id, old_url,
                                                                    old_models)
            race = Race({c.name: c.url for c in spec.candidates},
                        spec.criteria(self.base_criteria),
                        spec.places if spec.containers else None)
            faults = await asyncio.gather(*(self._identity(c.url, old_models)
                                            for c in spec.candidates if c.url))
            for candidate, fault in zip([c for c in spec.candidates if c.url], faults):
                if fault is not None:
                    race.fail(candidate.name, fault)
            self.spec, self.race = spec, race
            now = self._clock()
            shown_old = without_credentials(old_url)
            self.state = {"id": tune_id, "phase": "racing", "old_url": shown_old,
                          "promote": spec.promote, "started_unix": now, "ended_unix": None,
                          "reason": "racing", "winner": None, "cutover_id": None,
                          "history": [], "spec": spec.to_json(), "containers": {}}
            if old_info is not None:
                self.state.update(old_container=old_info.name, old_container_id=old_info.id,
                                  old_command=list(old_info.command), parallel=spec.places)
                self._containers = Lineup(self._cutover.driver, self.state["containers"],
                                          self._note, self._persist, launcher,
                                          GpuSlots(spec.new_gpus, spec.places))
            mode = (f", {spec.places} at a time, made from container {old_info.name}"
                    if old_info is not None else "")
            self._note(f"started: {len(spec.candidates)} candidates against {shown_old}{mode}")
            for candidate, fault in zip([c for c in spec.candidates if c.url], faults):
                if fault is not None:
                    self._note(f"{candidate.name} failed: {fault}")
            self._persist()
            self._task = start_task(self._run(), f"tune-{self.state['id']}")
            return self.status()

    async def _prepare_containers(self, spec: TuneSpec, tune_id: str, old_url: str,
                                  models: tuple[str, ...]) -> tuple[ContainerInfo, Launcher]:
        """The old container, checked, and the launcher of candidates (nothing made yet)."""
        driver = self._cutover.driver
        assert driver is not None and spec.old is not None and self._session is not None
        try:
            info = await asyncio.to_thread(driver.find, spec.old)
            if info.state != "running":
                raise Conflict(f"the old container {info.name} is {info.state}, not running")
            if not reaches(info, old_url):
                raise Conflict(f"the proxy's primary {without_credentials(old_url)} does not "
                               f"reach the container {info.name}: give --old the container "
                               "that serves")
            image = spec.new_image or info.image
            if not await asyncio.to_thread(driver.image_exists, image):
                raise NotFound(f"image {image!r} is not on this host: build or pull it first")
            if not spec.new_gpus and info.gpus:
                raise Conflict(f"the old container holds GPUs {list(info.gpus)!r}; give each "
                               "candidate running at once its own free GPUs (--new-gpus 2,3 "
                               "--new-gpus 4,5 ...)")
            for devices in spec.new_gpus:
                await asyncio.to_thread(driver.check_gpus, devices)
        except DriverError as exc:
            raise TuneRefused(http_status(exc), str(exc)) from exc
        version = await vllm_version(self._session, old_url)
        warmup = float(spec.cutover.get("warmup_timeout_s", DEFAULT_WARMUP_TIMEOUT_S))
        return info, Launcher(driver, self._session, OldEngine(info, old_url, models, version),
                              image, tune_id, warmup, self._tick_s)

    async def _old_models(self, spec: TuneSpec, old_url: str) -> tuple[str, ...]:
        if spec.served_model_name:
            return (spec.served_model_name,)
        assert self._session is not None, "open() first"
        try:
            return await served_models(self._session, old_url)
        except ProbeError as exc:
            raise TuneRefused(502, f"the old backend {without_credentials(old_url)} did not "
                                   f"list its models ({exc}); give served_model_name") from exc

    async def _identity(self, url: str, models: tuple[str, ...]) -> str | None:
        """Why the candidate at `url` cannot race (None: it can)."""
        assert self._session is not None
        try:
            served = await served_models(self._session, url)
        except (ProbeError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return f"not ready: /v1/models did not answer ({exc or type(exc).__name__})"
        missing = [m for m in models if m not in served]
        if missing:
            return f"serves another model: {list(served)!r}, not {missing!r}"
        return None

    async def abort(self, reason: str = "aborted by the operator") -> dict[str, Any]:
        """Stop the race and remove every candidate container; old keeps serving."""
        state = self.state
        if state is None or state["phase"] in TERMINAL:
            raise TuneRefused(409, "no tune is running")
        if state["phase"] == "promoting":
            raise TuneRefused(409, f"tune {state['id']} is promoting through cutover "
                                   f"{state['cutover_id']}: abort or roll back that cutover")
        if self.race is not None:
            self.race.abort(reason)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._lineup().stop_launches()
        await self._lineup().remove_all()
        self._end("aborted", reason)
        return self.status()

    def status(self) -> dict[str, Any]:
        state = self.state
        if state is None:
            return {"phase": None, "winner": None, "candidates": [], "terminal": True}
        out = {k: v for k, v in state.items() if k != "spec"}
        if out.get("old_command"):
            out["old_command"] = redact_argv(out["old_command"])
        out["terminal"] = state["phase"] in TERMINAL
        if self.race is not None:
            out.update(self.race.as_json())
            out["winner"] = state["winner"] or self.race.winner
        else:
            out.setdefault("candidates", state.get("candidates", []))
        made = state.get("containers") or {}
        # Shown without a token: secret-named flags' and variables' values hidden.
        asked = {c["name"]: _shown_args(c) for c in (state.get("spec") or {}).get("candidates", [])}
        out["candidates"] = [{**c, **asked.get(c["name"], {}), **made.get(c["name"], {})}
                             for c in out["candidates"]]
        if state.get("cutover_id"):
            cutover = self._cutover.status()
            out["cutover"] = {k: cutover.get(k) for k in ("id", "phase", "verdict", "reason")}
        return out

    # -- the loop --

    async def _run(self) -> None:
        race, spec, state = self.race, self.spec, self.state
        assert race is not None and spec is not None and state is not None
        try:
            lineup = self._lineup()
            await lineup.tend(race, spec, self._elapsed_s)
            while not race.over:
                await asyncio.sleep(self._tick_s)
                for change in race.look(self._elapsed_s(), self.judged_until):
                    self._note(change)
                await lineup.tend(race, spec, self._elapsed_s)
                self._persist()
            state["winner"] = race.winner
            promote = race.winner if spec.promote == "best" else None
            await lineup.stop_launches()
            await lineup.remove_all(keep=promote)
            if race.winner is None:
                self._end("done", f"no winner: {race.ending}")
                return
            if promote is None:
                self._end("done", f"report only: {race.winner} wins ({race.ending})")
                return
            try:
                url = await lineup.winner_url(race, spec, race.winner, self._elapsed_s)
            except LaunchFailed as exc:
                await lineup.remove_all()
                self._end("failed", str(exc))
                return
            await self._promote(url)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the race must end saying why
            log.exception("tune %s failed", state["id"])
            await self._lineup().remove_all()
            self._end("failed", f"internal error: {type(exc).__name__}: {exc}")

    def _elapsed_s(self) -> float:
        assert self.state is not None
        return self._clock() - float(self.state["started_unix"])

    def _lineup(self) -> Lineup:
        """The candidate containers (a bare lineup, for removal only, after a restart)."""
        assert self.state is not None
        if self._containers is None:
            self._containers = Lineup(self._cutover.driver,
                                      self.state.setdefault("containers", {}), self._note,
                                      self._persist)
        return self._containers

    async def _promote(self, url: str) -> None:
        state, spec = self.state, self.spec
        assert state is not None and spec is not None
        try:
            cutover = await self._cutover.start(spec.promotion(url, state.get("old_container_id")))
        except (StartRefused, ValueError) as exc:
            await self._lineup().remove_all()
            self._end("failed", f"the cutover to {state['winner']} was refused: {exc}")
            return
        state.update(phase="promoting", cutover_id=cutover.id,
                     reason=f"promoting {state['winner']} through cutover {cutover.id}")
        self._note(state["reason"])
        self._persist()
        await self._follow_promotion()

    async def _follow_promotion(self) -> None:
        state = self.state
        assert state is not None
        while True:
            cutover = self._cutover.state
            if cutover is None or cutover.id != state.get("cutover_id"):
                await self._lineup().remove_all()
                self._end("failed", "the promotion's cutover is gone")
                return
            if cutover.phase.terminal:
                ended = cutover.phase.value
                if ended == "done":
                    self._end("done", f"{state['winner']} promoted: cutover {cutover.id} done")
                else:  # old serves again: the winner's container has no use
                    await self._lineup().remove_all()
                    self._end("failed", f"the cutover to {state['winner']} ended {ended}: "
                                        f"{cutover.history[-1].reason}")
                return
            await asyncio.sleep(self._tick_s)

    def _note(self, text: str) -> None:
        assert self.state is not None
        log.info("tune %s: %s", self.state["id"], text)
        self.state["history"].append({"at_unix": self._clock(), "event": text})

    def _end(self, phase: TunePhase, reason: str) -> None:
        state = self.state
        assert state is not None
        state.update(phase=phase, reason=reason, ended_unix=self._clock())
        if self.race is not None:
            state["candidates"] = self.race.as_json()["candidates"]
        self._note(f"{phase}: {reason}")
        self._persist()

    def _persist(self) -> None:
        state = self.state
        assert state is not None
        kept = dict(state)
        if self.race is not None:  # the summary only: the records stay in memory
            kept["candidates"] = [{k: c[k] for k in ("name", "url", "state", "reason",
                                                     "requests", "verdict")}
                                  for c in self.race.as_json()["candidates"]]
        try:
            self._statefile.put(SECTION, kept)
        except OSError as exc:
            log.warning("tune %s: the state file cannot be written: %s", state["id"], exc)


TUNE_KEY = web.AppKey("tune", TuneService)


def _shown_args(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate's extra args and env as the open status shows them (secrets hidden)."""
    shown: dict[str, Any] = {}
    if "args" in candidate:
        shown["args"] = redact_argv(candidate["args"])
    if "env" in candidate:
        shown["env"] = redact_env(candidate["env"])
    return shown
