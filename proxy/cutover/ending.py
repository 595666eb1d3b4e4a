"""The phases that end a cutover (pure): the post-promotion window, draining the old
container, rolling back, and aborting (the clean-up before aborted or failed)."""

from __future__ import annotations

import re
from dataclasses import replace

from proxy.cutover.model import CutoverState, Phase
from proxy.cutover.phases import (
    GONE,
    WAIT,
    Step,
    count_failure,
    failed,
    failures,
    gate_summary,
    new_gone,
    rollback,
)
from proxy.cutover.steps import (
    Observation,
    RemoveContainer,
    SetRoutes,
    StartContainer,
    StopContainer,
)


def post_promotion(state: CutoverState, obs: Observation, now: float) -> Step:
    assert state.new is not None
    new_url = state.new.url
    if (gone := new_gone(state, obs)) is not None:
        return rollback(state, f"{gone} after the promotion", now)
    if obs.new_healthy is False:  # adopt mode: no container, its /health is what tells
        return rollback(state, f"the new backend {new_url} stopped answering /health after "
                        "the promotion", now)
    if state.mirror_off is None and (moved := _old_moved(state, obs)) is not None:
        state = replace(state, mirror_off=f"{moved}: no more mirroring to "
                                          f"{state.old.url}, whoever holds it now")
    routes = obs.routes
    shadow = None if state.mirror_off else state.old.url
    if routes is not None and (routes.shadow, routes.baseline) != (shadow, None):
        return state, SetRoutes(new_url, shadow, None, routes.version)
    if obs.gate is not None:
        state = replace(state, verdict=obs.gate.verdict, reasons=obs.gate.reasons,
                        samples=obs.gate.samples)
        state = count_failure(state, obs.gate.verdict)
        if state.gate_failures >= state.spec.failure_limit:
            reasons = "; ".join(obs.gate.reasons) or "no reason given"
            return rollback(state, f"post-promotion gate failed ({failures(state)}): "
                            f"{reasons}", now)
    if state.deadline_unix is not None and now >= state.deadline_unix:
        return state.moved(Phase.DRAINING_OLD, f"post-promotion window of "
                           f"{state.spec.post_promotion_s:g}s passed ({gate_summary(state)})",
                           now), WAIT
    return state, WAIT


def _old_moved(state: CutoverState, obs: Observation) -> str | None:
    """Why old is no longer at the address the shadow route names: its container gone,
    stopped or moved; in adopt mode (no container), another engine answering there."""
    identity = obs.old_identity
    if state.old.container_id is None:
        why = identity.mismatch(state.served_models, state.old.vllm_version) if (
            "old_identity" in obs.seen and identity is not None) else None
        return f"the engine at {state.old.url} is not old ({why})" if why else None
    if "old" not in obs.seen:
        return None
    if obs.old is None or obs.old.state != "running":
        return f"the old container {state.old.name} is {obs.old.state if obs.old else 'gone'}"
    if obs.old_url != state.old.url:
        return f"the old container {state.old.name} is now at {obs.old_url}"
    return None


def draining_old(state: CutoverState, obs: Observation, now: float) -> Step:
    assert state.new is not None
    routes = obs.routes
    if routes is None or "inflight" not in obs.seen:
        return state, WAIT
    if routes.shadow is not None or routes.baseline is not None:
        return state, SetRoutes(state.new.url, None, None, routes.version)
    drained = state.drained_unix
    if drained is None:
        left = obs.inflight.get(state.old.url, 0)
        if left > 0:
            return replace(state, note=f"{left} request(s) still in flight on old"), WAIT
        drained = now
        state = replace(state, drained_unix=now, deadline_unix=now + state.spec.scale_down_delay_s)
    if now < drained + state.spec.scale_down_delay_s:
        return state, WAIT
    old_id = state.old.container_id
    if old_id is None:
        return state.moved(Phase.DONE, "old drained; it is no container of ours to stop",
                           now), WAIT
    if "old" not in obs.seen:
        return state, WAIT
    info = obs.old
    if not state.old_stopped:
        if info is not None and info.state not in GONE + ("created",):
            if (why := failed(obs, "StopContainer")) is not None:
                return state.moved(Phase.DONE, f"new serves; stopping old failed: {why}",
                                   now), WAIT
            return state, StopContainer(old_id, state.shutdown_grace_s)
        state = replace(state, old_stopped=True)
    if state.spec.remove_old and not state.old.removed:
        if info is not None and info.state != "missing":
            if (why := failed(obs, "RemoveContainer")) is not None:
                return state.moved(Phase.DONE, f"old stopped; removing it failed: {why}",
                                   now), WAIT
            return state, RemoveContainer(old_id)
        state = replace(state, old=replace(state.old, removed=True))
        return state.moved(Phase.DONE, "old drained, stopped and removed", now), WAIT
    return state.moved(Phase.DONE, "old drained and stopped; kept for a rollback", now), WAIT


def rolling_back(state: CutoverState, obs: Observation, now: float) -> Step:
    assert state.new is not None
    old = state.old.url
    routes = obs.routes
    if routes is None:
        return state, WAIT
    if routes.primary == old:
        if state.rollback_s is None:
            state = replace(state, rollback_s=now - (state.rollback_started_unix or now))
        if routes.shadow is not None or routes.baseline is not None:
            return state, SetRoutes(old, None, None, routes.version)
        return _remove_new(state, obs, now, Phase.ROLLED_BACK,
                           f"old serves again ({state.rollback_s:.2f}s after the rollback "
                           "began)")
    old_id = state.old.container_id
    if old_id is not None:
        if "old" not in obs.seen:
            return state, WAIT
        why = failed(obs, "StartContainer")
        if obs.old is None or obs.old.state == "missing" or why is not None:
            why = why or "it no longer exists"
            reason = f"cannot roll back: old container {state.old.name}: {why}; new stays primary"
            return state.moved(Phase.FAILED, reason, now, error=reason), WAIT
        if obs.old.state != "running":
            return replace(state, old_stopped=False), StartContainer(old_id)
    url = obs.old_url or old
    identity = obs.old_identity
    if identity is not None and (why := identity.mismatch(state.served_models,
                                                          state.old.vllm_version)):
        reason = (f"cannot roll back: the engine at {url} is not old ({why}); new stays "
                  "primary")
        return state.moved(Phase.FAILED, reason, now, error=reason), WAIT
    if not obs.old_healthy or identity is None:
        if state.deadline_unix is not None and now >= state.deadline_unix:
            reason = (f"cannot roll back: old did not answer /health, /v1/models and "
                      f"/version at {url} within {state.spec.warmup_timeout_s:g}s; new stays "
                      "primary")
            return state.moved(Phase.FAILED, reason, now, error=reason), WAIT
        return replace(state, note=f"waiting for old to answer at {url}"), WAIT
    if url != old:  # restarted at another address: clients go where it is now
        state = replace(state, old=replace(state.old, url=url))
    return state, SetRoutes(url, None, None, routes.version)


def aborting(state: CutoverState, obs: Observation, now: float) -> Step:
    end = state.end_phase or Phase.ABORTED
    routes = obs.routes
    if routes is None:
        return state, WAIT
    # Back to the routes the operator had set, without the new version unless it was theirs.
    want = (state.old.url, state.operator_shadow, state.operator_baseline)
    if (state.new is not None and state.new.url in (routes.shadow, routes.baseline)
            and (routes.primary, routes.shadow, routes.baseline) != want):
        return state, SetRoutes(*want, routes.version)
    return _remove_new(state, obs, now, end, state.error or "aborted")


def _remove_new(state: CutoverState, obs: Observation, now: float, end: Phase,
                reason: str) -> Step:
    """The last step of abort and rollback: the new container removed (or kept), then
    `end`. Requests still in flight on new finish first."""
    if state.spec.adopt:
        return state.moved(end, reason, now), WAIT
    if "new" not in obs.seen:
        if state.deadline_unix is not None and now >= state.deadline_unix:
            return state.moved(end, f"{reason}; the new container could not be checked: "
                               f"{state.note}", now), WAIT
        return state, WAIT
    info = obs.new
    if info is None or info.state == "missing":
        if state.removing_new is not None:
            what = f"new container {state.removing_new} removed"
        elif state.new and state.new.container_id:
            what = "new container removed"
        else:
            what = "no new container was created"
        new = replace(state.new, removed=True) if state.new else None
        return state.moved(end, f"{reason}; {what}", now, new=new), WAIT
    if end is Phase.FAILED and state.log_tail is None:
        if "new_logs" not in obs.seen:
            return state, WAIT
        state = replace(state, log_tail=engine_lines(obs.new_logs or ""))
    if state.spec.keep_failed:
        return state.moved(end, f"{reason}; new container {info.name} kept (--keep-failed)",
                           now), WAIT
    if state.phase is Phase.ROLLING_BACK and state.new is not None:
        # It was primary: its clients' requests finish before it goes.
        left = obs.inflight.get(state.new.url, 0)
        if "inflight" not in obs.seen or left > 0:
            return replace(state, note=f"{left} request(s) still in flight on new"), WAIT
    if (why := failed(obs, "RemoveContainer")) is not None:
        return state.moved(end, f"{reason}; removing the new container {info.name} failed: "
                           f"{why}", now), WAIT
    return replace(state, removing_new=f"{info.name} ({info.state})"), \
        RemoveContainer(info.id)


# Lines an engine writes about a client's request (vLLM's --enable-log-requests and
# --enable-log-outputs print prompts and outputs): never kept in the state file.
_REQUEST_LINE = re.compile(r"Received request|Generated response|prompt|messages|"
                           r"output|content|\bRequest\b|\{", re.IGNORECASE)


def engine_lines(text: str) -> str:
    """The engine's own lines of a container log tail: those about a request (which may
    quote its prompt or output) are replaced by one count."""
    kept, dropped = [], 0
    for line in text.splitlines():
        if _REQUEST_LINE.search(line):
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        kept.append(f"[{dropped} line(s) about requests left out: they may quote prompts]")
    return "\n".join(kept)
