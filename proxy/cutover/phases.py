"""One handler per phase up to the promotion: state + observation -> state + action (pure).

Each handler is level-triggered: it looks at what is (routes, the new container found by
its labels, the warm-up probe, the gate) and asks for the one action that moves toward
the phase's goal, so repeating a step after a crash does the same thing again or nothing.
"""

from __future__ import annotations

from dataclasses import replace

from proxy.cutover.control import GateView
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_REPLACES, LABEL_ROLE, NewContainerPlan
from proxy.cutover.eta import Estimate, ends_early, estimate, hopeless_since, rate_per_s
from proxy.cutover.model import CutoverState, Endpoint, Phase
from proxy.cutover.steps import (
    Action,
    CreateNew,
    Observation,
    SaveImage,
    SetRoutes,
    Wait,
)

Step = tuple[CutoverState, Action]
WAIT = Wait()
GONE = ("exited", "dead", "missing")


def fail(state: CutoverState, reason: str, now: float, end: Phase = Phase.FAILED) -> Step:
    """Go clean up (routes back to old alone, the new container removed), then end in `end`."""
    return state.moved(Phase.ABORTING, reason, now, end_phase=end, error=reason,
                       deadline_unix=now + state.shutdown_grace_s + 60.0), WAIT


def rollback(state: CutoverState, reason: str, now: float) -> Step:
    return state.moved(Phase.ROLLING_BACK, reason, now, error=reason,
                       rollback_started_unix=now,
                       deadline_unix=now + state.spec.warmup_timeout_s), WAIT


_OLD_PRIMARY = (Phase.BACKING_UP, Phase.STARTING_NEW, Phase.WARMING, Phase.SHADOWING,
                Phase.ABORTING)
_NEW_PRIMARY = (Phase.POST_PROMOTION, Phase.DRAINING_OLD)


def routes_taken(state: CutoverState, obs: Observation, now: float) -> Step | None:
    """The end of the cutover when another writer moved the primary where this phase
    never puts it: acting on routes someone else chose would overwrite them unseen."""
    if obs.routes is None:
        return None
    allowed = []
    if state.phase not in _NEW_PRIMARY:
        allowed.append(state.old.url)
    if state.new is not None and state.phase not in _OLD_PRIMARY:
        allowed.append(state.new.url)
    if obs.routes.primary in allowed:
        return None
    reason = (f"routes changed outside the cutover: the primary is {obs.routes.primary!r}, "
              f"expected {' or '.join(repr(a) for a in allowed)}; nothing more is done "
              "automatically")
    return state.moved(Phase.FAILED, reason, now, error=reason), WAIT


def new_gone(state: CutoverState, obs: Observation) -> str | None:
    """Why the new container is not running any more (None: running, adopted or unseen)."""
    if state.spec.adopt or "new" not in obs.seen:
        return None
    info = obs.new
    if info is None:
        return "the new container disappeared"
    if info.state in GONE:
        code = f" with code {info.exit_code}" if info.exit_code is not None else ""
        return f"the new container {info.name} {info.state}{code}"
    return None


def failed(obs: Observation, action: str) -> str | None:
    """The message of `action`'s failure in the previous step, unless it may be retried."""
    failure = obs.failure
    if failure is None or failure.transient or failure.action != action:
        return None
    return failure.message


def passing(state: CutoverState) -> bool:
    return state.verdict == "pass" and state.samples >= state.spec.min_samples


def count_failure(state: CutoverState, verdict: str) -> CutoverState:
    """The run of failing evaluations, with this one counted (any other verdict ends it)."""
    return replace(state, gate_failures=state.gate_failures + 1 if verdict == "fail" else 0)


def failures(state: CutoverState) -> str:
    return f"{state.gate_failures} evaluations in a row"


def gate_summary(state: CutoverState) -> str:
    return f"gate {state.verdict or 'not evaluated'}, {state.samples}/{state.spec.min_samples} samples"


def new_plan(state: CutoverState) -> NewContainerPlan:
    spec = state.spec
    assert spec.new_image is not None
    old_name = state.old.name or "vllm"
    return NewContainerPlan(
        image=spec.new_image, name=spec.new_name or f"{old_name}-cutover-{state.id}",
        labels={LABEL_CUTOVER: state.id, LABEL_ROLE: "new", LABEL_REPLACES: old_name},
        command=spec.new_command, env=spec.new_env, env_remove=spec.new_env_unset,
        gpus=spec.new_gpus)


def backing_up(state: CutoverState, obs: Observation, now: float) -> Step:
    image, path = state.old.image or "", state.spec.backup_image or ""
    if (why := failed(obs, "SaveImage")) is not None:
        return fail(state, f"saving {image!r} to {path!r} failed: {why}", now)
    if obs.saved_bytes is None:
        return state, SaveImage(image, path)
    nxt = Phase.WARMING if state.spec.adopt else Phase.STARTING_NEW
    return state.moved(nxt, f"saved {image} to {path} ({obs.saved_bytes} bytes)", now,
                       backup_bytes=obs.saved_bytes,
                       deadline_unix=now + state.spec.warmup_timeout_s), WAIT


def starting_new(state: CutoverState, obs: Observation, now: float) -> Step:
    if (why := failed(obs, "CreateNew")) is not None:
        return fail(state, f"creating the new container failed: {why}", now)
    if state.deadline_unix is not None and now >= state.deadline_unix:
        # Whatever the daemon does (gone, slow, a container left in `created`): the
        # deadline holds, and the clean-up says what it found.
        if obs.new is not None:
            seen = f"{obs.new.name} is {obs.new.state}"
        else:
            seen = "it was not seen" if "new" not in obs.seen else "none was created"
        return fail(state, f"the new container was not running at an address within "
                    f"{state.spec.warmup_timeout_s:g}s ({seen}; "
                    f"{state.note or 'no error reported'})", now)
    if "new" not in obs.seen:
        return state, WAIT
    if obs.new is not None:
        if obs.new_url is None:
            return replace(state, note="no address for the new container yet"), WAIT
        info = obs.new
        new = Endpoint(url=obs.new_url, container_id=info.id, name=info.name, image=info.image)
        return state.moved(Phase.WARMING, f"created {info.name} ({info.id[:12]}) from "
                           f"{info.image}, reached at {obs.new_url}", now, new=new,
                           deadline_unix=state.deadline_unix), WAIT
    return state, CreateNew(new_plan(state))


def warming(state: CutoverState, obs: Observation, now: float) -> Step:
    if (gone := new_gone(state, obs)) is not None:
        return fail(state, f"{gone} before it was ready", now)
    warm = obs.warmup
    if warm is not None and warm.models is not None:
        missing = [m for m in state.served_models if m not in warm.models]
        if missing:
            return fail(state, f"the new backend serves {list(warm.models)!r}, not the old "
                        f"one's {list(state.served_models)!r}", now)
    if warm is not None and warm.healthy and warm.models is not None and warm.completion_ok:
        assert state.new is not None
        version = f"vLLM {warm.vllm_version}" if warm.vllm_version else "version unknown"
        reason = (f"new is ready ({version}): /health answers, /v1/models lists "
                  f"{list(warm.models)!r}, a completion answered")
        return state.moved(Phase.SHADOWING, reason, now,
                           new=replace(state.new, vllm_version=warm.vllm_version),
                           deadline_unix=now + state.spec.analysis_timeout_s,
                           analysis_since_unix=now + state.spec.analysis_delay_s), WAIT
    note = warm.error if warm is not None else state.note
    if state.deadline_unix is not None and now >= state.deadline_unix:
        return fail(state, f"the new backend was not ready within "
                    f"{state.spec.warmup_timeout_s:g}s: {note or 'no answer'}", now)
    return replace(state, note=note), WAIT


def _estimate(state: CutoverState, gate: GateView, now: float) -> Estimate | None:
    """The binding check and about how long it needs at the rate seen since the evidence
    began (None once decided)."""
    if gate.verdict != "inconclusive" or not gate.checks:
        return None
    since = state.analysis_since_unix
    rate = rate_per_s(0, since, gate.samples, now) if since is not None else 0.0
    left = state.deadline_unix - now if state.deadline_unix is not None else None
    return estimate(gate.checks, rate, left, gate.samples)


def _hopeless(state: CutoverState, est: Estimate | None, now: float) -> Step | None:
    """Abort when the gate has been hopeless (`Estimate.hopeless`) on every look for
    `eta.HOPELESS_FOR_S`, rather than shadowing on to the analysis timeout."""
    if est is None or not ends_early(state.hopeless_since_unix, now):
        return None
    left = state.deadline_unix - now if state.deadline_unix is not None else 0.0
    return fail(state, f"the gate cannot decide before the analysis timeout ({left:.0f}s "
                f"left of {state.spec.analysis_timeout_s:g}s): {est.hopeless_reason} "
                f"({gate_summary(state)}); more traffic, a longer --analysis-timeout or "
                "looser limits would let it", now, Phase.ABORTED)


def shadowing(state: CutoverState, obs: Observation, now: float) -> Step:
    assert state.new is not None
    if (gone := new_gone(state, obs)) is not None:
        return fail(state, f"{gone} while shadowing", now)
    routes = obs.routes
    if routes is not None and (routes.shadow, routes.baseline) != (state.new.url,
                                                                     state.baseline_url):
        return state, SetRoutes(state.old.url, state.new.url, state.baseline_url,
                                routes.version)
    est = None
    if obs.gate is not None:
        est = _estimate(state, obs.gate, now)
        state = replace(state, verdict=obs.gate.verdict, reasons=obs.gate.reasons,
                        samples=obs.gate.samples,
                        waiting_for=est.line() if est is not None else None,
                        decision_in_s=est.seconds_left if est is not None else None,
                        hopeless_since_unix=hopeless_since(state.hopeless_since_unix, est, now))
    if state.pending == "force_promote":
        return state.moved(Phase.PROMOTING, f"promoted by the operator with --force "
                           f"({gate_summary(state)})", now), WAIT
    if state.pending == "promote":
        if passing(state):
            return state.moved(Phase.PROMOTING, f"promoted by the operator "
                               f"({gate_summary(state)})", now), WAIT
        state = replace(state, pending=None,
                        note=f"promote not done: {gate_summary(state)} (--force skips the gate)")
    if obs.gate is not None:
        state = count_failure(state, obs.gate.verdict)
        if state.gate_failures >= state.spec.failure_limit:
            reasons = "; ".join(obs.gate.reasons) or "no reason given"
            return fail(state, f"gate failed while shadowing ({failures(state)}): {reasons}",
                        now, Phase.ABORTED)
        if passing(state) and state.spec.auto_promote:
            return state.moved(Phase.PROMOTING, f"{gate_summary(state)}: promoting", now), WAIT
    if state.deadline_unix is not None and now >= state.deadline_unix:
        return fail(state, f"analysis timeout after {state.spec.analysis_timeout_s:g}s "
                    f"({gate_summary(state)})", now, Phase.ABORTED)
    if state.pending is None and (ended := _hopeless(state, est, now)) is not None:
        return ended
    return state, WAIT


def promoting(state: CutoverState, obs: Observation, now: float) -> Step:
    assert state.new is not None
    old, new = state.old.url, state.new.url
    routes = obs.routes
    if routes is None:
        return state, WAIT
    if (routes.primary, routes.shadow, routes.baseline) == (new, old, None):
        return state.moved(Phase.POST_PROMOTION, f"new is primary, old is the shadow "
                           f"(routes version {routes.version})", now, promoted_unix=now,
                           deadline_unix=now + state.spec.post_promotion_s), WAIT
    # One atomic change: requests in flight finish on old, new ones go to new.
    return state, SetRoutes(new, old, None, routes.version)
