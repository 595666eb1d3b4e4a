"""Commands have an order: the first accepted command that ends the shadowing wins; a
later, different one is refused (409) naming the pending one, however close together the
two arrive."""

from __future__ import annotations

import asyncio

import pytest

from proxy.cutover.control import GateView
from proxy.cutover.machine import CommandRefused
from proxy.cutover.model import CutoverSpec, Phase
from tests.cutover.test_admin import AUTH, _api
from tests.cutover.world import FAST, World, ended, until

INCONCLUSIVE = GateView("inconclusive", ("3 < 10 samples",), 3, 10)


async def _shadowing(world: World):  # type: ignore[no-untyped-def]
    world.control.judge = lambda w: INCONCLUSIVE
    service = await world.service()
    await service.start(CutoverSpec(**{**FAST, "auto_promote": False}))
    await until(lambda: service.state is not None and service.state.phase is Phase.SHADOWING)
    return service


@pytest.mark.parametrize(("first", "second", "end"), [
    ("abort", "force_promote", Phase.ABORTED),
    ("force_promote", "abort", Phase.DONE),
])
async def test_a_second_command_before_the_step_is_refused(world: World, first, second,
                                                           end) -> None:
    service = await _shadowing(world)
    service.command(first)
    with pytest.raises(CommandRefused, match=f"{first} is pending"):
        service.command(second)  # no await between: the reconciler has not stepped
    done = await ended(service)
    assert done.phase is end, done.history


async def test_abort_and_force_promote_together_over_http(world: World,
                                                          aiohttp_client) -> None:
    service = await _shadowing(world)
    api = await _api(aiohttp_client, service)
    abort, promote = await asyncio.gather(
        api.post("/admin/cutover/abort", headers=AUTH),
        api.post("/admin/cutover/promote", json={"force": True}, headers=AUTH))
    answers = {"abort": abort.status, "promote": promote.status}
    assert sorted(answers.values()) == [202, 409], answers
    loser = promote if promote.status == 409 else abort
    assert "is pending" in (await loser.json())["error"]["message"]
    done = await ended(service)
    assert done.phase is (Phase.ABORTED if abort.status == 202 else Phase.DONE), done.history
