"""The reconciler and the service around it: fake driver and proxy control, a real state
file, and real HTTP warm-up probes against simulated vLLM servers on sockets."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any

import pytest

from proxy.cutover.control import GateView, RoutesView
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_ROLE
from proxy.cutover.model import CutoverSpec, CutoverState, Phase
from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig
from tests.cutover.world import FAST, OLD_ID, World, dead_url, ended, until


async def test_full_cutover_with_real_http_warmup(world: World) -> None:
    svc = await world.service()
    state = await svc.start(CutoverSpec(**FAST))
    assert state.served_models == ("tiny",) and state.old.vllm_version == "0.31.0"
    end = await ended(svc)
    assert end.phase is Phase.DONE, end.history
    old, new = world.old_url, world.new_url
    assert world.control.changes == [(old, new, None), (new, old, None), (new, None, None)]
    (create,) = world.driver.named("create_like")
    assert create[1] == OLD_ID and create[2].labels[LABEL_CUTOVER] == end.id
    assert create[2].labels[LABEL_ROLE] == "new"
    assert world.driver.named("stop") == [("stop", OLD_ID, 30.0)]
    assert end.new is not None and end.new.vllm_version == "0.32.0" and end.old_stopped
    assert world.persisted() == end  # written after every step, the last one included
    # The evidence counts from the start of shadowing plus the analysis delay.
    shadowing = next(t.at_unix for t in end.history if t.to_phase is Phase.SHADOWING)
    assert end.analysis_since_unix == shadowing + FAST["analysis_delay_s"]
    assert {(w.since_unix, w.old_url, w.new_url) for w in world.control.windows} == {
        (end.analysis_since_unix, old, new)}


async def test_a_state_is_reported_when_it_changes_not_per_tick(world: World) -> None:
    """Each phase (for the phase gauge) and each change within one (the gate's estimate,
    `decision_in_s`), never the same state twice in a row: the reconciler ticks many times
    per phase."""
    reported: list[CutoverState] = []
    svc = await world.service(on_state=reported.append)
    await svc.start(CutoverSpec(**FAST))
    end = await ended(svc)
    assert end.phase is Phase.DONE
    assert all(a != b for a, b in itertools.pairwise(reported))
    phases = [p for i, p in enumerate(s.phase for s in reported)
              if i == 0 or p is not reported[i - 1].phase]
    assert phases == [Phase(t.to_phase) for t in end.history][-len(phases):]
    assert reported[-1] == end


@pytest.mark.parametrize("keep_failed", [False, True])
async def test_model_name_mismatch_fails_and_old_keeps_serving(world: World, aiohttp_server,
                                                               keep_failed) -> None:
    other = await aiohttp_server(make_sim_app(SimConfig(model_name="other-model")))
    world.driver.new_url = str(other.make_url("")).rstrip("/")
    svc = await world.service()
    await svc.start(CutoverSpec(**FAST, keep_failed=keep_failed))
    end = await ended(svc)
    assert end.phase is Phase.FAILED
    assert "serves ['other-model'], not the old one's ['tiny']" in (end.error or "")
    assert end.log_tail == world.driver.logs
    removed = [c[1] for c in world.driver.named("remove")]
    assert removed == ([] if keep_failed else ["new0000000001"])
    assert OLD_ID not in removed and not world.driver.named("stop")
    assert world.control.view.primary == world.old_url and world.control.changes == []


async def test_never_healthy_fails_at_the_warmup_deadline(world: World) -> None:
    world.driver.new_url = dead_url()
    svc = await world.service()
    await svc.start(CutoverSpec(**{**FAST, "warmup_timeout_s": 1.0}))
    end = await ended(svc)
    assert end.phase is Phase.FAILED and "not ready within 1s: /health:" in (end.error or "")
    assert "Cannot connect" in (end.error or "") or "refused" in (end.error or "")
    assert len(world.driver.named("remove")) == 1 and not world.driver.named("stop")


async def test_container_exit_during_warmup_fails_with_its_logs(world: World) -> None:
    world.driver.create_state = "exited"
    svc = await world.service()
    await svc.start(CutoverSpec(**FAST))
    end = await ended(svc)
    assert end.phase is Phase.FAILED and "exited with code 1 before it was ready" in end.error
    assert end.log_tail and "CUDA out of memory" in end.log_tail
    assert "CUDA out of memory" in svc.status()["log_tail"]


async def test_manual_promote_then_rollback_restarts_the_stopped_old(world: World) -> None:
    svc = await world.service()
    spec = CutoverSpec(**{**FAST, "auto_promote": False, "post_promotion_s": 60.0})
    await svc.start(spec)
    await until(lambda: svc.state is not None and svc.state.samples == 20)
    assert svc.state is not None and svc.state.phase is Phase.SHADOWING
    assert svc.command("promote").pending == "promote"
    await until(lambda: svc.state is not None and svc.state.phase is Phase.POST_PROMOTION)
    world.driver.stop(OLD_ID, 1.0)  # as if drained and stopped: the rollback must start it
    asked = time.time()
    svc.command("rollback")
    end = await ended(svc)
    assert end.phase is Phase.ROLLED_BACK, end.history
    # not held up by a /health probe of the stopped container (it would wait 10 s)
    began = next(t.at_unix for t in end.history if t.to_phase is Phase.ROLLING_BACK)
    assert began - asked < 2.0, began - asked
    assert ("start", OLD_ID) in world.driver.calls
    # Old alone again. Version 4, or 5 where a reconciler tick saw old stopped and took it
    # off the shadow route before the rollback (a loaded machine).
    view = world.control.view
    assert view.version in (4, 5) and view == RoutesView(view.version, world.old_url)
    assert end.rollback_s is not None and 0 <= end.rollback_s < 5
    assert f"{end.rollback_s:.2f}s after the rollback began" in end.history[-1].reason


async def test_gate_fail_aborts_and_operator_abort(world: World) -> None:
    world.control.judge = lambda w: GateView("fail", ("match rate 0.40 < 0.90",), 30, 10)
    svc = await world.service()
    await svc.start(CutoverSpec(**FAST))
    end = await ended(svc)
    assert end.phase is Phase.ABORTED and "match rate 0.40" in (end.error or "")
    assert world.control.view.shadow is None and len(world.driver.named("remove")) == 1
    world.control.judge = lambda w: GateView("inconclusive", (), 1, 10)
    await svc.start(CutoverSpec(**FAST))
    await until(lambda: svc.state is not None and svc.state.phase is Phase.SHADOWING)
    svc.command("abort")
    end = await ended(svc)
    assert end.phase is Phase.ABORTED and end.history[-2].reason == "aborted by the operator"


async def test_route_conflict_is_retried_and_a_taken_primary_stops(world: World) -> None:
    control, racing = world.control, {"n": 0}
    real_set = control.set_routes

    def set_routes_racing(*args: Any, **kwargs: Any) -> RoutesView:
        if racing["n"] == 0:  # another writer gets in first, once (same content)
            racing["n"] = 1
            control.view = replace(control.view, version=control.view.version + 1)
        return real_set(*args, **kwargs)

    control.set_routes = set_routes_racing  # type: ignore[method-assign]
    control.judge = lambda w: GateView("inconclusive", (), 1, 10)
    svc = await world.service()
    await svc.start(CutoverSpec(**FAST))
    await until(lambda: control.view.shadow == world.new_url)
    control.view = RoutesView(control.view.version + 1, "http://other:9000")
    end = await ended(svc)
    assert end.phase is Phase.FAILED and "'http://other:9000'" in (end.error or "")
    assert not world.driver.named("remove")  # nothing more done on routes it does not own
