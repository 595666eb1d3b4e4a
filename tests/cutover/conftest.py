"""The `world` fixture: simulated old and new vLLM servers on sockets, fake driver and
control, a state file in tmp_path; every service it opened is closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.cutover.control import RoutesView
from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig
from tests.cutover.docker_scene import driver, scene  # noqa: F401 - fixtures
from tests.cutover.fakes import FakeControl, FakeDriver
from tests.cutover.subnet_scene import subnet_stack  # noqa: F401 - fixture
from tests.cutover.world import World, old_health_follows


@pytest.fixture
async def world(aiohttp_server: Any, tmp_path: Any) -> AsyncIterator[World]:
    fake = FakeDriver(new_url="", old_url="")
    old_app = make_sim_app(SimConfig(model_name="tiny", version="0.31.0"))
    old_app.middlewares.append(old_health_follows(fake))
    old = await aiohttp_server(old_app)
    new = await aiohttp_server(make_sim_app(SimConfig(model_name="tiny", version="0.32.0")))
    fake.old_url, fake.new_url = str(old.make_url("")).rstrip("/"), \
        str(new.make_url("")).rstrip("/")
    fake.add_old()
    control = FakeControl(RoutesView(1, fake.old_url))
    w = World(fake.old_url, fake.new_url, fake, control,
              str(tmp_path / "proxy.state.json"), [])
    yield w
    for svc in w.services:
        await svc.close()
