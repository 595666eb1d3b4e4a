"""Identity before routing, over real sockets (the driver faked, the engines real sims):
old restarted at another address (127.0.0.2) while another engine answers at its former
one (127.0.0.1, same port). A rollback reaches old where it is now, or refuses the other
engine and says so; clients never go to it (issue 24, item 1; the Docker version is
test_identity_docker.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import replace
from typing import Any

import pytest

from proxy.cutover.addressing import current_url, network_of
from proxy.cutover.control import RoutesView
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_ROLE, ContainerInfo, NetworkAttachment
from proxy.cutover.machine import begin
from proxy.cutover.model import CutoverSpec, Endpoint, Phase
from proxy.cutover.shell.reconciler import SECTION
from proxy.cutover.shell.service import CutoverService
from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig
from proxy.statefile import StateFile
from tests.cutover.world import FAST, OLD_ID, World, ended, until

NEW_ID = "new0000000042"


def _port_free_on_both() -> int:
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
            try:
                b.bind(("127.0.0.2", port))
            except OSError:
                continue
            return port
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


def _at(ip: str) -> dict[str, NetworkAttachment]:
    return {"net": NetworkAttachment(ip=ip)}


async def _done_cutover(world: World, aiohttp_server: Any, impostor: SimConfig) -> str:
    """A cutover that ended `done`, old stopped; old's engine now at 127.0.0.2:P and
    `impostor` at its former 127.0.0.1:P. Returns old's former URL."""
    port = _port_free_on_both()
    await aiohttp_server(make_sim_app(SimConfig(model_name="tiny", version="0.31.0")),
                         host="127.0.0.2", port=port)
    await aiohttp_server(make_sim_app(impostor), host="127.0.0.1", port=port)
    former = f"http://127.0.0.1:{port}"
    world.driver.add_old(state="exited", networks=_at("127.0.0.1"))
    world.driver.containers[NEW_ID] = ContainerInfo(
        id=NEW_ID, name="vllm-old-cutover-r1", image="vllm:new", state="running",
        labels={LABEL_CUTOVER: "r1", LABEL_ROLE: "new"})
    now = time.time()
    old = Endpoint(url=former, container_id=OLD_ID, name="vllm-old", image="vllm:old",
                   vllm_version="0.31.0", network="net")
    state = begin(CutoverSpec(**FAST), "r1", old, now - 5, None, served_models=("tiny",),
                  shutdown_grace_s=2.0)
    new = Endpoint(url=world.new_url, container_id=NEW_ID, name="vllm-old-cutover-r1")
    done = replace(state, new=new, promoted_unix=now - 3, old_stopped=True).moved(
        Phase.DONE, "old drained and stopped; kept for a rollback", now - 1)
    StateFile(world.state_path).put(SECTION, done.to_json())
    world.control.view = RoutesView(5, world.new_url)
    # When started again, old comes up at another address on its network.
    world.driver._set(OLD_ID, networks=_at("127.0.0.2"))
    return former


async def test_rollback_goes_where_old_is_now(world: World, aiohttp_server: Any) -> None:
    former = await _done_cutover(world, aiohttp_server,
                                 SimConfig(model_name="other", version="9.9.9"))
    svc = await world.service()
    svc.command("rollback")
    end = await ended(svc)
    moved = former.replace("127.0.0.1", "127.0.0.2")
    assert end.phase is Phase.ROLLED_BACK, end.history
    assert world.control.view.primary == moved and end.old.url == moved
    assert (former, None, None) not in world.control.changes


async def test_rollback_refuses_another_engine_at_old_s_address(world: World,
                                                                aiohttp_server: Any) -> None:
    former = await _done_cutover(world, aiohttp_server,
                                 SimConfig(model_name="other", version="9.9.9"))
    world.driver._set(OLD_ID, networks=_at("127.0.0.1"))  # the driver still says the old IP
    svc = await world.service()
    svc.command("rollback")
    end = await ended(svc)
    assert end.phase is Phase.FAILED and "is not old (it serves ['other']" in (end.error or "")
    assert world.control.view.primary == world.new_url  # clients stay on new
    assert not any(change[0] == former for change in world.control.changes)


@pytest.mark.parametrize(("url", "ip", "network", "now"), [
    ("http://10.0.0.5:8000/v1", "10.0.0.5", "net", "http://10.0.0.9:8000/v1"),
    ("http://vllm-old:8000", "10.0.0.5", None, "http://vllm-old:8000"),
])
def test_network_of_and_current_url(url: str, ip: str, network: str | None, now: str) -> None:
    info = ContainerInfo(id=OLD_ID, name="vllm-old", image="i", state="running",
                         networks=_at(ip))
    assert network_of(info, url) == network
    assert current_url(url, network, replace(info, networks=_at("10.0.0.9"))) == now
    assert current_url(url, "net", replace(info, networks={})) is None


async def test_adopt_mode_stops_mirroring_to_another_engine_at_old_s_address(
        world: World, aiohttp_server: Any) -> None:
    """Adopt mode has no container to watch: after the promotion, old's URL is re-identified
    each step, and an impostor there (same address, another model and version) ends the
    shadow route for good, with the reason in status."""
    port = _port_free_on_both()
    old_server = await aiohttp_server(
        make_sim_app(SimConfig(model_name="tiny", version="0.31.0")), host="127.0.0.1",
        port=port)
    old_url = f"http://127.0.0.1:{port}"
    world.control.view = RoutesView(1, old_url)
    svc = await world.service(driver=False)
    adopt = {k: v for k, v in FAST.items() if k not in ("old", "new_image")}
    await svc.start(CutoverSpec(**{**adopt, "post_promotion_s": 30.0}, old_url=old_url,
                                new_url=world.new_url))
    await until(lambda: svc.state is not None and svc.state.phase is Phase.POST_PROMOTION
                and world.control.view.shadow == old_url)
    await old_server.close()
    await aiohttp_server(make_sim_app(SimConfig(model_name="other", version="9.9.9")),
                         host="127.0.0.1", port=port)
    await until(lambda: world.control.view.shadow is None)
    state = svc.state
    assert state is not None and state.phase is Phase.POST_PROMOTION
    off = state.mirror_off or ""
    # Either difference names the impostor (which one the probe reads first may vary).
    assert f"the engine at {old_url} is not old (" in off, off
    assert "it serves ['other']" in off or "its /version is '9.9.9'" in off, off
    assert world.control.view.primary == world.new_url
    for _ in range(20):  # for good: the route stays off
        await asyncio.sleep(0.01)
        assert world.control.view.shadow is None


@pytest.mark.parametrize("gone", [{"state": "exited"}, {"networks": _at("127.0.0.3")}],
                         ids=["stopped", "moved"])
async def test_a_mirror_connection_to_old_is_confirmed_and_a_refusal_stops_mirroring_at_once(
        world: World, gone: dict[str, Any]) -> None:
    """After the promotion old is the shadow: a new mirror connection to its URL is
    confirmed only while its container still holds that address; a refusal wakes the
    cutover, which turns mirroring off without waiting for its tick (30 s here)."""
    world.driver.add_old(networks=_at("127.0.0.1"))
    svc = await world.service()
    await svc.start(CutoverSpec(**{**FAST, "post_promotion_s": 60.0}))
    old_url = world.old_url
    await until(lambda: svc.state is not None and svc.state.phase is Phase.POST_PROMOTION
                and world.control.view.shadow == old_url)
    await svc.close()
    slow = CutoverService(StateFile(world.state_path), world.control, world.driver, tick_s=30)
    world.services.append(slow)
    await slow.open()  # resumes post_promotion; steps once, then sleeps for the tick
    await asyncio.sleep(0.1)
    assert await slow.confirm_peer(old_url) is None
    assert await slow.confirm_peer(world.new_url) is None  # not old: nothing to check
    world.driver._set(OLD_ID, **gone)
    refusal = await slow.confirm_peer(old_url)
    assert refusal is not None and "the old container vllm-old is" in refusal, refusal
    await until(lambda: world.control.view.shadow is None, timeout_s=2.0)
    state = slow.state
    assert state is not None and state.phase is Phase.POST_PROMOTION
    assert "no more mirroring to" in (state.mirror_off or "")
