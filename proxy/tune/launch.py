"""Container mode's I/O: a candidate's container made from the old one's configuration
through the cutover's container driver (the only code that touches the Docker socket),
waited for, and proven to be the engine meant before any traffic goes to it.

Proof, before `admit`: the container is the one this tune made (by id: running, with
this tune's and this candidate's labels), the proxy reaches it at the URL built the way
it reaches old (and that URL does not reach old), and at that URL `/health` answers,
`/v1/models` lists old's served models, one completion answers (the cutover's warm-up,
`proxy.cutover.shell.warmup.probe_ready`), and `/version` is old's when the image is old's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp

from proxy.cutover.addressing import reaches
from proxy.cutover.driver import ContainerDriver, ContainerInfo, DriverError
from proxy.cutover.ending import engine_lines
from proxy.cutover.shell.warmup import ProbeError, engine_identity, probe_ready
from proxy.tasks import start_task
from proxy.tune.containers import (
    LABEL_CANDIDATE,
    LABEL_TUNE,
    Extra,
    candidate_plan,
    container_name,
)

log = logging.getLogger(__name__)


class LaunchFailed(RuntimeError):
    """The candidate cannot race; the message says why (its container is left for the
    caller to remove, by name)."""


@dataclass(frozen=True)
class OldEngine:
    """The old container and what answers at the proxy's primary, recorded at start."""

    info: ContainerInfo
    url: str
    models: tuple[str, ...]
    vllm_version: str | None


@dataclass(frozen=True)
class Launched:
    container: str  # its name
    id: str
    url: str
    vllm_version: str | None


class Launcher:
    """Makes and proves candidate containers for one tune."""

    def __init__(self, driver: ContainerDriver, session: aiohttp.ClientSession, old: OldEngine,
                 image: str, tune_id: str, warmup_timeout_s: float, tick_s: float = 1.0) -> None:
        self._driver = driver
        self._session = session
        self.old = old
        self.image = image
        self.tune_id = tune_id
        self._warmup_timeout_s = warmup_timeout_s
        self._tick_s = tick_s
        self._creating: set[asyncio.Future[ContainerInfo]] = set()

    def name_of(self, index: int, candidate: str) -> str:
        return container_name(self.old.info.name, self.tune_id, index, candidate)

    async def start(self, index: int, candidate: str, extra: Extra,
                    gpus: tuple[str, ...] | None) -> Launched:
        """Create, wait until ready, prove; LaunchFailed otherwise."""
        name = self.name_of(index, candidate)
        plan = candidate_plan(self.image, name, self.tune_id, candidate,
                              self.old.info.command, extra, gpus)
        # Shielded: a cancelled wait must not leave a container that nobody knows of.
        creating = start_task(asyncio.to_thread(self._driver.create_like, self.old.info, plan),
                              f"tune-create-{name}", awaited=True)
        self._creating.add(creating)
        creating.add_done_callback(self._creating.discard)
        try:
            info = await asyncio.shield(creating)
            url = await asyncio.to_thread(self._driver.url_for, info, self.old.url)
        except DriverError as exc:
            raise LaunchFailed(f"its container could not be made: {exc}") from exc
        log.info("tune %s: %s is container %s at %s", self.tune_id, candidate, name, url)
        await self._ready(info, url)
        version = await self._prove(info, candidate, url)
        return Launched(name, info.id, url, version)

    async def settle(self) -> None:
        """Until no container is being created (before removing them by name)."""
        if self._creating:
            await asyncio.gather(*self._creating, return_exceptions=True)

    async def _ready(self, info: ContainerInfo, url: str) -> None:
        deadline = time.monotonic() + self._warmup_timeout_s
        last = "not probed yet"
        while True:
            now = await self._inspect(info.id)
            if now.state != "running":
                code = f" (exit code {now.exit_code})" if now.exit_code is not None else ""
                tail = await self._log_tail(info.id)
                raise LaunchFailed(f"its container {info.name} is {now.state}{code}; last "
                                   f"log lines: {tail}")
            result = await probe_ready(self._session, url, self.old.models)
            if result.completion_ok:
                return
            last = result.error or "not ready"
            if time.monotonic() >= deadline:
                raise LaunchFailed(f"not ready within {self._warmup_timeout_s:g}s: {last}")
            await asyncio.sleep(self._tick_s)

    async def _prove(self, made: ContainerInfo, candidate: str, url: str) -> str | None:
        info = await self._inspect(made.id)
        labels = info.labels
        if info.state != "running" or labels.get(LABEL_TUNE) != self.tune_id \
                or labels.get(LABEL_CANDIDATE) != candidate:
            raise LaunchFailed(f"container {made.id[:12]} is {info.state} with labels "
                               f"{dict(labels)!r}: not the one this tune made")
        try:
            now_url = await asyncio.to_thread(self._driver.url_for, info, self.old.url)
        except DriverError as exc:
            raise LaunchFailed(f"its address cannot be read again: {exc}") from exc
        if now_url != url:
            raise LaunchFailed(f"its container moved from {url} to {now_url} while warming")
        if reaches(self.old.info, url):
            raise LaunchFailed(f"{url} reaches the old container {self.old.info.name}")
        try:
            identity = await engine_identity(self._session, url)
        except ProbeError as exc:
            raise LaunchFailed(f"who answers at {url} is unknown: {exc}") from exc
        same_image = self.image == self.old.info.image
        why = identity.mismatch(self.old.models, self.old.vllm_version if same_image else None)
        if why:
            raise LaunchFailed(f"the engine at {url} is not the one meant: {why}")
        return identity.vllm_version

    async def _inspect(self, container_id: str) -> ContainerInfo:
        try:
            return await asyncio.to_thread(self._driver.inspect, container_id)
        except DriverError as exc:
            raise LaunchFailed(f"its container cannot be inspected: {exc}") from exc

    async def _log_tail(self, container_id: str) -> str:
        try:
            text = await asyncio.to_thread(self._driver.logs_tail, container_id, 10)
        except DriverError as exc:
            return f"(unreadable: {exc})"
        return engine_lines(text).strip()[-1500:] or "(none)"
