"""The cutover tests' world and helpers (the `world` fixture is in conftest.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from proxy.cutover.model import CutoverState
from proxy.cutover.shell.reconciler import SECTION
from proxy.cutover.shell.service import CutoverService
from proxy.statefile import StateFile
from tests.cutover.fakes import FakeControl, FakeDriver

FAST: dict[str, Any] = {"old": "vllm-old", "new_image": "vllm:new", "min_samples": 10,
                        "warmup_timeout_s": 5.0, "analysis_timeout_s": 5.0,
                        "post_promotion_s": 0.05, "scale_down_delay_s": 0.02,
                        "analysis_delay_s": 0.0}
OLD_ID = "old0000000001"


@dataclass
class World:
    old_url: str
    new_url: str
    driver: FakeDriver
    control: FakeControl
    state_path: str
    services: list[CutoverService]

    async def service(self, driver: bool = True,
                      on_state: Callable[[CutoverState], None] | None = None) -> CutoverService:
        svc = CutoverService(StateFile(self.state_path), self.control,
                             self.driver if driver else None, tick_s=0.005, on_state=on_state)
        self.services.append(svc)
        await svc.open()
        return svc

    def persisted(self) -> CutoverState:
        return CutoverState.from_json(StateFile(self.state_path).get(SECTION))


def old_health_follows(driver: FakeDriver) -> Any:
    """The old server's /health does not answer while its (fake) container is not running,
    as a stopped container's address does not: a probe waits for its timeout."""
    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        info = driver.containers.get(OLD_ID)
        if request.path == "/health" and (info is None or info.state != "running"):
            await asyncio.sleep(60)
            return web.Response(status=503)
        return await handler(request)
    return middleware


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def ended(svc: CutoverService) -> CutoverState:
    state = await asyncio.wait_for(svc.wait(), 10)
    assert state is not None
    return state


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
