"""The cutover's pure core: start, operator commands, what to observe, and `advance`.

No I/O and no clock: every function takes the time as `now` (unix seconds) and returns
values, so every path (happy, each fault, each operator command) is tested without
Docker or sockets. The reconciler (`proxy.cutover.shell.reconciler`) does the I/O around it.

    backing_up -> starting_new -> warming -> shadowing -> promoting -> post_promotion
        -> draining_old -> done
    (before the promotion)  abort, warm-up failure, gate fail, timeout -> aborting
        -> aborted | failed
    (after it)  rollback, post-promotion gate fail -> rolling_back -> rolled_back
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from proxy.cutover import ending, phases
from proxy.cutover.model import (
    Command,
    CutoverSpec,
    CutoverState,
    Endpoint,
    Phase,
    Transition,
)
from proxy.cutover.phases import Step
from proxy.cutover.steps import Observation, Probe, Wait

__all__ = ["CommandRefused", "CutoverRunning", "advance", "begin", "command",
           "ensure_can_begin", "needs", "refuse_over_pending"]

_HANDLERS: dict[Phase, Callable[[CutoverState, Observation, float], Step]] = {
    Phase.BACKING_UP: phases.backing_up,
    Phase.STARTING_NEW: phases.starting_new,
    Phase.WARMING: phases.warming,
    Phase.SHADOWING: phases.shadowing,
    Phase.PROMOTING: phases.promoting,
    Phase.POST_PROMOTION: ending.post_promotion,
    Phase.DRAINING_OLD: ending.draining_old,
    Phase.ROLLING_BACK: ending.rolling_back,
    Phase.ABORTING: ending.aborting,
}
_BEFORE_PROMOTION = (Phase.BACKING_UP, Phase.STARTING_NEW, Phase.WARMING, Phase.SHADOWING)


class CutoverRunning(RuntimeError):
    """A cutover is already in progress (one at a time per proxy)."""


class CommandRefused(RuntimeError):
    """An operator command that does not apply to the cutover's phase (the message says
    what would)."""


def ensure_can_begin(current: CutoverState | None) -> None:
    """CutoverRunning while `current` has not ended (one cutover at a time per proxy)."""
    if current is not None and not current.phase.terminal:
        raise CutoverRunning(f"cutover {current.id} is still {current.phase.value}; wait for "
                             "it to end, or abort / roll it back first")


def begin(spec: CutoverSpec, cutover_id: str, old: Endpoint, now: float,
          current: CutoverState | None, served_models: tuple[str, ...] = (),
          baseline_url: str | None = None, shutdown_grace_s: float = 30.0,
          operator_routes: tuple[str | None, str | None] = (None, None)) -> CutoverState:
    """A new cutover's first state; CutoverRunning while `current` has not ended.
    `operator_routes`: the shadow and baseline routes set when it began (an abort puts
    them back)."""
    ensure_can_begin(current)
    new = Endpoint(url=spec.new_url) if spec.new_url is not None else None
    if spec.backup_image is not None:
        first = Phase.BACKING_UP
    else:
        first = Phase.WARMING if spec.adopt else Phase.STARTING_NEW
    target = f"adopting {spec.new_url}" if spec.adopt else f"image {spec.new_image}"
    old_what = f"{old.name} ({old.image}) at {old.url}" if old.name else old.url
    reason = f"started: old {old_what} -> new {target}"
    return CutoverState(
        id=cutover_id, spec=spec, phase=first, old=old, new=new, started_unix=now,
        phase_since_unix=now, served_models=served_models, baseline_url=baseline_url,
        operator_shadow=operator_routes[0], operator_baseline=operator_routes[1],
        shutdown_grace_s=shutdown_grace_s,
        deadline_unix=None if first is Phase.BACKING_UP else now + spec.warmup_timeout_s,
        history=(Transition(now, None, first, reason),))


def command(state: CutoverState, cmd: Command) -> CutoverState:
    """`state` with `cmd` pending (acted on by the next step); CommandRefused when it does
    not apply now. The first accepted command wins: a different one while it is pending is
    refused, naming it (an abort answered "pending" must end in `aborted`)."""
    refuse_over_pending(state.id, state.pending, cmd)
    phase = state.phase
    if cmd == "rollback":
        if phase.promoted and not state.old.removed:
            return replace(state, pending=cmd)
        if phase.promoted:
            raise CommandRefused(f"cutover {state.id}: the old container {state.old.name} was "
                                 "removed (remove_old); there is nothing to roll back to")
        if phase in _BEFORE_PROMOTION:
            raise CommandRefused(f"cutover {state.id} is {phase.value}, not promoted yet: "
                                 "abort it instead")
    elif cmd == "abort":
        if phase in _BEFORE_PROMOTION:
            return replace(state, pending=cmd)
        if phase.promoted:
            raise CommandRefused(f"cutover {state.id} is {phase.value}: the new version "
                                 "already serves; roll back instead")
    elif phase is Phase.SHADOWING:
        if cmd == "force_promote" or phases.passing(state):
            return replace(state, pending=cmd)
        # What holds it, one line each: the checks that passed are not news here.
        holding = [r for r in state.reasons if not r.startswith("pass")] or ["no reasons yet"]
        raise CommandRefused(f"cutover {state.id}: {phases.gate_summary(state)}; promote "
                             "--force skips the gate. Not passed yet:"
                             + "".join(f"\n  - {reason}" for reason in holding))
    elif phase in (Phase.BACKING_UP, Phase.STARTING_NEW, Phase.WARMING):
        raise CommandRefused(f"cutover {state.id} is {phase.value}: the new backend is not "
                             "ready to take traffic yet")
    elif phase.promoted:
        raise CommandRefused(f"cutover {state.id} is {phase.value}: already promoted")
    raise CommandRefused(f"cutover {state.id} is {phase.value}: {cmd} does not apply")


def refuse_over_pending(cutover_id: str, pending: Command | None, cmd: Command) -> None:
    """CommandRefused when `pending` (accepted, not yet acted on) differs from `cmd`."""
    if pending is not None and pending != cmd:
        raise CommandRefused(f"cutover {cutover_id}: {pending} is pending (accepted first); "
                             f"{cmd} is refused until it has been acted on")


def needs(state: CutoverState) -> frozenset[Probe]:
    """What the reconciler must look at before the next step of `state`."""
    phase = state.phase
    wanted: set[Probe]
    if state.pending == "rollback" or phase is Phase.ROLLING_BACK:
        wanted = {"routes", "old", "old_health", "old_identity", "inflight", "new"}
    elif state.pending in ("abort", "force_promote") or phase is Phase.STARTING_NEW:
        # a forced promotion skips the gate: evaluating it would only delay the switch
        wanted = {"routes", "new"}
    elif phase is Phase.PROMOTING:
        wanted = {"routes"}
    elif phase is Phase.WARMING:
        wanted = {"routes", "new", "warmup"}
    elif phase is Phase.SHADOWING:
        wanted = {"routes", "gate", "new"}
    elif phase is Phase.POST_PROMOTION:  # old is the shadow: where it is, before mirroring
        wanted = {"routes", "gate", "new", "old"}
        if state.spec.adopt:  # no containers to watch: new's /health, who answers at old's
            wanted |= {"new_health", "old_health", "old_identity"}
    elif phase is Phase.DRAINING_OLD:
        wanted = {"routes", "inflight", "old"}
    elif phase is Phase.ABORTING:
        wanted = {"routes", "new"}
        if state.end_phase is Phase.FAILED and state.log_tail is None:
            wanted.add("new_logs")
    else:
        wanted = set()
    if state.spec.adopt:
        wanted -= {"new", "new_logs"}
    if state.old.container_id is None:
        wanted.discard("old")
    return frozenset(wanted)


def advance(state: CutoverState, obs: Observation, now: float) -> Step:
    """One step: the next state and the one action that moves toward it.

    A step that changes the phase runs the next phase's handler at once with the same
    observation (minus the last action's result), so a gate pass promotes in the same
    step and the routing change is not one tick late.
    """
    state = replace(state, note="; ".join(obs.problems) or _transient(obs))
    if state.pending == "rollback" and state.phase.promoted:
        state, _ = phases.rollback(state, "rollback requested by the operator", now)
    elif state.pending == "abort" and state.phase in _BEFORE_PROMOTION:
        state, _ = phases.fail(state, "aborted by the operator", now, Phase.ABORTED)
    for _ in range(len(_HANDLERS)):
        handler = _HANDLERS.get(state.phase)
        if handler is None:  # ended
            return state, phases.WAIT
        if (taken := phases.routes_taken(state, obs, now)) is not None:
            return taken
        nxt, action = handler(state, obs, now)
        if nxt.phase is state.phase or not isinstance(action, Wait):
            return nxt, action
        state, obs = nxt, replace(obs, failure=None, saved_bytes=None)
    return state, phases.WAIT


def _transient(obs: Observation) -> str | None:
    if obs.failure is not None and obs.failure.transient:
        return f"{obs.failure.action} will be retried: {obs.failure.message}"
    return None
