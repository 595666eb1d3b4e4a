"""Starting a cutover: every refusal changes nothing (no state written, no container, no
route); status JSON labels the primary and shadow by version."""

from __future__ import annotations

import os

import pytest

from proxy.cutover.control import GateView, RoutesView
from proxy.cutover.driver import Conflict, EngineUnavailable
from proxy.cutover.model import CutoverSpec, Phase
from proxy.cutover.shell.service import StartRefused
from tests.cutover.world import FAST, World, dead_url, ended, until


def _untouched(world: World) -> None:
    assert not os.path.exists(world.state_path)
    assert not world.driver.named("create_like") and world.control.changes == []


@pytest.mark.parametrize(("setup", "changes", "status", "quoted"), [
    (lambda w: None, {"old": "nope"}, 404, "no container matches 'nope'"),
    (lambda w: None, {"new_image": "vllm:missing"}, 404, "image 'vllm:missing' is not on"),
    (lambda w: w.driver.add_old(gpus=("0",)), {}, 409, "holds GPUs ['0']; give new_gpus"),
    (lambda w: w.driver.raises.update(check_gpus=Conflict("GPU 1 is held by vllm-x")),
     {"new_gpus": ("1",)}, 409, "GPU 1 is held by vllm-x"),
    (lambda w: w.driver.raises.update(find=EngineUnavailable("Docker socket not mounted")),
     {}, 503, "Docker socket not mounted"),
    (lambda w: w.driver.add_old(state="exited"), {}, 409, "vllm-old is exited, not running"),
    (lambda w: None, {"old_url": "http://elsewhere:8000"}, 409,
     "not old_url 'http://elsewhere:8000'"),
])
async def test_start_refusals_change_nothing(world: World, setup, changes, status,
                                             quoted) -> None:
    setup(world)
    svc = await world.service()
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**{**FAST, **changes}))
    assert info.value.status == status and quoted in str(info.value)
    _untouched(world)
    assert svc.status()["phase"] is None


async def test_old_backend_down_is_refused(world: World) -> None:
    world.control.view = RoutesView(1, dead_url())
    svc = await world.service()
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**FAST))
    assert info.value.status == 502 and "did not list its models" in str(info.value)
    _untouched(world)


async def test_no_driver_501_but_adopt_mode_works(world: World) -> None:
    svc = await world.service(driver=False)
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**FAST))
    assert info.value.status == 501 and "--driver docker" in str(info.value)
    _untouched(world)
    adopt = {k: v for k, v in FAST.items() if k not in ("old", "new_image")}
    state = await svc.start(CutoverSpec(**adopt, new_url=world.new_url))
    assert state.phase is Phase.WARMING and state.old.container_id is None
    end = await ended(svc)
    assert end.phase is Phase.DONE and world.control.view.primary == world.new_url
    assert world.driver.calls == []


async def test_second_start_refused_while_one_runs(world: World) -> None:
    world.control.judge = lambda w: GateView("inconclusive", ("12 < 50 samples",), 12, 50)
    svc = await world.service()
    first = await svc.start(CutoverSpec(**FAST))
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**FAST))
    assert info.value.status == 409 and f"cutover {first.id} is still" in str(info.value)
    assert len(world.driver.named("find")) <= 2  # the second one asked the engine nothing
    await until(lambda: svc.state is not None and svc.state.phase is Phase.SHADOWING)
    await until(lambda: svc.status()["samples"] == 12)
    status = svc.status()
    assert status["primary"]["version"] == "old" and status["shadow"]["version"] == "new"
    assert status["primary"]["url"] == world.old_url and status["shadow"]["url"] == world.new_url
    assert status["verdict"] == "inconclusive" and status["reasons"] == ["12 < 50 samples"]
    assert status["min_samples"] == 10 and 0 < status["time_left_s"] <= 5.0
    assert [h["to"] for h in status["history"]] == ["starting_new", "warming", "shadowing"]
    assert status["old"]["vllm_version"] == "0.31.0" and status["new"]["vllm_version"] == "0.32.0"


@pytest.mark.parametrize(("changes", "quoted"), [
    ({"new_url": "PRIMARY_AS_LOCALHOST"}, "the new_url 'http://localhost:"),
    ({"new_url": "NEW", "baseline_url": "NEW_AS_LOCALHOST"}, "is the new_url (new)"),
])
async def test_a_setup_whose_evidence_means_nothing_is_a_400(world: World, changes,
                                                             quoted) -> None:
    def url(value: str) -> str:
        return {"NEW": world.new_url,
                "NEW_AS_LOCALHOST": world.new_url.replace("127.0.0.1", "localhost") + "/",
                "PRIMARY_AS_LOCALHOST": world.old_url.replace("127.0.0.1", "localhost")}[value]

    adopt = {k: v for k, v in FAST.items() if k not in ("old", "new_image")}
    svc = await world.service()
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**adopt, **{k: url(v) for k, v in changes.items()}))
    assert info.value.status == 400 and quoted in str(info.value), str(info.value)
    _untouched(world)


async def test_a_baseline_that_is_the_primary_starts_with_a_warning(world: World) -> None:
    adopt = {k: v for k, v in FAST.items() if k not in ("old", "new_image")}
    svc = await world.service()
    await svc.start(CutoverSpec(**adopt, new_url=world.new_url,
                                baseline_url=world.old_url.replace("127.0.0.1", "localhost")))
    assert "within one engine" in svc.status()["warnings"][0]


async def test_a_new_url_reaching_the_old_container_itself_is_a_400(world: World) -> None:
    """Another address of the same container (its name where the primary uses a published
    port): the container id tells, not the URL."""
    svc = await world.service()
    spec = {k: v for k, v in FAST.items() if k != "new_image"}
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**spec, new_url="http://vllm-old:8000"))
    assert info.value.status == 400 and "reaches the old container vllm-old" in str(info.value)
    _untouched(world)


@pytest.mark.parametrize("flag", ["new_url", "baseline_url"])
async def test_a_dead_new_or_baseline_url_is_refused_at_start(world: World, flag: str) -> None:
    """Nothing listening there: refused at once in plain words (502), not accepted and then
    retried every few seconds until the warmup deadline."""
    svc = await world.service(driver=False)
    adopt = {k: v for k, v in FAST.items() if k not in ("old", "new_image")}
    dead = dead_url()
    urls = {"new_url": world.new_url, flag: dead}
    with pytest.raises(StartRefused) as info:
        await svc.start(CutoverSpec(**adopt, **urls))
    message = str(info.value)
    assert info.value.status == 502, message
    assert f"--{flag.replace('_', '-')}: nothing answers at {dead}" in message
    assert "start that engine first" in message
    _untouched(world)


@pytest.mark.parametrize("adopt", [True, False])
async def test_an_abort_puts_back_the_routes_the_operator_had_set(world: World,
                                                                 adopt: bool) -> None:
    """Issue 34: an abort silently removed the shadow and baseline routes the operator had
    set on the command line. It now restores them (old stays primary); a container the
    cutover made is never left in the routes."""
    operator_shadow = world.new_url if adopt else dead_url()
    operator_baseline = dead_url()
    world.control.view = RoutesView(1, world.old_url, operator_shadow, operator_baseline)
    world.control.judge = lambda w: GateView("inconclusive", ("12 < 50 samples",), 12, 50)
    svc = await world.service(driver=not adopt)
    spec = ({k: v for k, v in FAST.items() if k not in ("old", "new_image")}
            | {"new_url": world.new_url} if adopt else FAST)
    state = await svc.start(CutoverSpec(**spec))
    await until(lambda: svc.state is not None and svc.state.phase is Phase.SHADOWING)
    if not adopt:  # the cutover's own container is the shadow now
        assert world.control.view.shadow == svc.state.new.url != operator_shadow
    svc.command("abort")
    end = await ended(svc)
    assert end.id == state.id and end.phase is Phase.ABORTED
    view = world.control.view
    assert (view.primary, view.shadow, view.baseline) == (
        world.old_url, operator_shadow, operator_baseline)
    assert world.persisted().operator_baseline == operator_baseline
