"""A proxy restarted mid-cutover resumes it from the persisted phase: each phase's step is
repeated safely (the new container is found by its labels, never created twice; routes
are compared before they are set)."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any

import pytest

from proxy.cutover.control import RoutesView
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_ROLE, ContainerInfo
from proxy.cutover.machine import begin
from proxy.cutover.model import CutoverSpec, CutoverState, Endpoint, Phase
from proxy.cutover.shell.reconciler import SECTION
from proxy.statefile import StateFile, StateFileError
from tests.cutover.world import FAST, OLD_ID, World, ended

NEW_ID = "new0000000042"

# phase -> (routes as (primary, shadow) in old/new terms, old container state, end phase)
RESUME: dict[Phase, tuple[tuple[str, str | None], str, Phase]] = {
    Phase.BACKING_UP: (("old", None), "running", Phase.DONE),
    Phase.STARTING_NEW: (("old", None), "running", Phase.DONE),
    Phase.WARMING: (("old", None), "running", Phase.DONE),
    Phase.SHADOWING: (("old", "new"), "running", Phase.DONE),
    Phase.PROMOTING: (("new", "old"), "running", Phase.DONE),  # routes set, not yet persisted
    Phase.POST_PROMOTION: (("new", "old"), "running", Phase.DONE),
    Phase.DRAINING_OLD: (("new", None), "running", Phase.DONE),
    Phase.ABORTING: (("old", "new"), "running", Phase.ABORTED),
    Phase.ROLLING_BACK: (("new", "old"), "exited", Phase.ROLLED_BACK),
}


def _crashed_in(world: World, phase: Phase, tmp_path: Any) -> CutoverState:
    """The state a proxy killed in `phase` left on disk, and the world as it was then."""
    (primary, shadow), old_state, _ = RESUME[phase]
    urls = {"old": world.old_url, "new": world.new_url, None: None}
    world.control.view = RoutesView(7, urls[primary] or "", urls[shadow])
    world.driver.add_old(state=old_state)
    extra = {"backup_image": str(tmp_path / "old.tar")} if phase is Phase.BACKING_UP else {}
    now = time.time()
    old = Endpoint(url=world.old_url, container_id=OLD_ID, name="vllm-old", image="vllm:old")
    state = begin(CutoverSpec(**FAST, **extra), "r1", old, now - 1, None,
                  served_models=("tiny",), shutdown_grace_s=2.0)
    if phase is Phase.BACKING_UP:
        return state
    # The new container was created before the kill (for STARTING_NEW: not yet recorded).
    world.driver.containers[NEW_ID] = ContainerInfo(
        id=NEW_ID, name="vllm-old-cutover-r1", image="vllm:new", state="running",
        labels={LABEL_CUTOVER: "r1", LABEL_ROLE: "new"})
    new = None if phase is Phase.STARTING_NEW else Endpoint(
        url=world.new_url, container_id=NEW_ID, name="vllm-old-cutover-r1", image="vllm:new")
    changes: dict[str, Any] = {"new": new, "deadline_unix": now + 5}
    if phase.promoted or phase is Phase.ROLLING_BACK:
        changes.update(promoted_unix=now - 0.5, deadline_unix=now + 0.05)
    if phase is Phase.ROLLING_BACK:
        changes.update(rollback_started_unix=now - 0.2, old_stopped=True, deadline_unix=now + 5)
    if phase is Phase.ABORTING:
        changes.update(end_phase=Phase.ABORTED, error="aborted by the operator")
    return replace(state, phase=phase, **changes)


@pytest.mark.parametrize("phase", list(RESUME))
async def test_restart_resumes_from_the_persisted_phase(world: World, tmp_path: Any,
                                                        phase: Phase) -> None:
    crashed = _crashed_in(world, phase, tmp_path)
    StateFile(world.state_path).put(SECTION, crashed.to_json())
    svc = await world.service()  # a fresh proxy process: it reads the file and goes on
    end = await ended(svc)
    assert end.phase is RESUME[phase][2], end.history
    assert end.id == "r1" and end.history[:len(crashed.history)] == crashed.history
    assert end.history[len(crashed.history)].from_phase is phase
    created = world.driver.named("create_like")
    assert len(created) == (1 if phase is Phase.BACKING_UP else 0)
    assert world.persisted() == end
    new_url, old_url = world.new_url, world.old_url
    final = {Phase.DONE: (new_url, None), Phase.ABORTED: (old_url, None),
             Phase.ROLLED_BACK: (old_url, None)}[end.phase]
    assert (world.control.view.primary, world.control.view.shadow) == final
    if end.phase is Phase.ROLLED_BACK:
        assert ("start", OLD_ID) in world.driver.calls and end.rollback_s is not None
    if end.phase is Phase.DONE:
        assert world.driver.named("stop") == [("stop", OLD_ID, 2.0)]


async def test_a_second_resume_after_the_end_does_nothing(world: World, tmp_path: Any) -> None:
    StateFile(world.state_path).put(SECTION, _crashed_in(world, Phase.DRAINING_OLD,
                                                         tmp_path).to_json())
    end = await ended(await world.service())
    calls = len(world.driver.calls)
    again = await world.service()
    assert again.state == end and await again.wait() == end
    assert len(world.driver.calls) == calls and again.status()["phase"] == "done"


@pytest.mark.parametrize(("change", "named"), [
    ({"phase": "flying"}, "cutover.phase: unknown phase 'flying'"),
    ({"history": [{"at_unix": "x", "from": None, "to": "warming", "reason": "r"}]},
     "cutover.history[0].at_unix must be a finite number >= 0, got 'x'"),
    ({"deadline_unix": "soon"}, "cutover.deadline_unix must be a finite number >= 0 or null"),
    ({"samples": -1}, "cutover.samples must be an integer >= 0, got -1"),
    ({"old": {"url": 7}}, "cutover.old.url must be a string, got 7"),
    ({"old_stopped": "yes"}, "cutover.old_stopped must be true or false"),
    ({"gate_failures": 1.5}, "cutover.gate_failures must be an integer >= 0"),
    ({"history": {"a": 1}}, "cutover.history must be a list"),
])
async def test_a_state_that_cannot_be_resumed_stops_the_start_naming_the_field(
        world: World, tmp_path: Any, change: dict[str, Any], named: str) -> None:
    state = {**_crashed_in(world, Phase.SHADOWING, tmp_path).to_json(), **change}
    StateFile(world.state_path).put(SECTION, state)
    with pytest.raises(StateFileError, match=re.escape(named)):
        await world.service()
    assert world.driver.calls == [] and world.control.changes == []
