"""The pure core: every path of the cutover, stepped with values (no Docker, no sockets)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.cutover.control import GateView
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_ROLE
from proxy.cutover.machine import CommandRefused, CutoverRunning, advance, begin, command, needs
from proxy.cutover.model import Phase
from proxy.cutover.steps import (
    ActionFailure,
    CreateNew,
    Observation,
    RemoveContainer,
    SaveImage,
    SetRoutes,
    StartContainer,
    StopContainer,
    Wait,
    WarmupResult,
)
from proxy.gate.checks import Check, Need
from tests.cutover.states import (
    NEW_URL,
    OLD_URL,
    T0,
    container,
    gate,
    obs,
    old_endpoint,
    routes,
    spec,
    started,
    state_in,
)

READY = WarmupResult(healthy=True, models=("tiny",), completion_ok=True, vllm_version="0.32.0")
OLD_RUNNING = container("old-id-0001")
OLD_EXITED = container("old-id-0001", "exited", exit_code=0)


def test_happy_path_records_every_transition() -> None:
    s = started()
    assert s.phase is Phase.STARTING_NEW and needs(s) == {"routes", "new"}
    s, action = advance(s, obs(routes=routes(), new=None), T0 + 1)
    assert isinstance(action, CreateNew)
    assert action.plan.labels[LABEL_CUTOVER] == "c1" and action.plan.labels[LABEL_ROLE] == "new"
    assert action.plan.image == "vllm:new" and action.plan.name == "vllm-old-cutover-c1"
    s, action = advance(s, obs(routes=routes(), new=container(), new_url=NEW_URL), T0 + 2)
    assert s.phase is Phase.WARMING and s.new is not None and s.new.url == NEW_URL
    s, action = advance(s, obs(routes=routes(), new=container(),
                               warmup=WarmupResult(healthy=True, error="/v1/models: 503")), T0 + 3)
    assert s.phase is Phase.WARMING and s.note == "/v1/models: 503"
    # Ready: shadowing starts and its routes are asked for in the same step.
    s, action = advance(s, obs(routes=routes(), new=container(), warmup=READY), T0 + 4)
    assert s.phase is Phase.SHADOWING and s.new.vllm_version == "0.32.0"
    assert action == SetRoutes(OLD_URL, NEW_URL, None, 1)
    shadowed = routes(OLD_URL, NEW_URL, version=2)
    s, action = advance(s, obs(routes=shadowed, gate=gate("inconclusive", 4)), T0 + 5)
    assert s.phase is Phase.SHADOWING and isinstance(action, Wait) and s.samples == 4
    # The gate passes with enough samples: promoted with one routing change, same step.
    s, action = advance(s, obs(routes=shadowed, gate=gate("pass", 12), new=container()), T0 + 6)
    assert s.phase is Phase.PROMOTING and action == SetRoutes(NEW_URL, OLD_URL, None, 2)
    promoted = routes(NEW_URL, OLD_URL, version=3)
    s, action = advance(s, obs(routes=promoted), T0 + 7)
    assert s.phase is Phase.POST_PROMOTION and s.promoted_unix == T0 + 7
    s, action = advance(s, obs(routes=promoted, gate=gate("pass", 30), new=container()), T0 + 20)
    assert s.phase is Phase.POST_PROMOTION and isinstance(action, Wait)
    s, action = advance(s, obs(routes=promoted, gate=gate("pass", 40), new=container()), T0 + 57)
    assert s.phase is Phase.DRAINING_OLD
    s, action = advance(s, obs(routes=promoted, inflight={OLD_URL: 2}, old=OLD_RUNNING), T0 + 58)
    assert action == SetRoutes(NEW_URL, None, None, 3)
    alone = routes(NEW_URL, version=4)
    s, action = advance(s, obs(routes=alone, inflight={OLD_URL: 2}, old=OLD_RUNNING), T0 + 59)
    assert isinstance(action, Wait) and s.note == "2 request(s) still in flight on old"
    s, action = advance(s, obs(routes=alone, inflight={OLD_URL: 0}, old=OLD_RUNNING), T0 + 60)
    assert isinstance(action, Wait) and s.drained_unix == T0 + 60
    s, action = advance(s, obs(routes=alone, inflight={}, old=OLD_RUNNING), T0 + 89)
    assert isinstance(action, Wait)  # scale-down delay of 30 s not over
    s, action = advance(s, obs(routes=alone, inflight={}, old=OLD_RUNNING), T0 + 90)
    assert action == StopContainer("old-id-0001", 20.0)
    s, action = advance(s, obs(routes=alone, inflight={}, old=OLD_EXITED), T0 + 95)
    assert s.phase is Phase.DONE and s.old_stopped and not s.old.removed
    assert [(t.from_phase, t.to_phase) for t in s.history] == [
        (None, Phase.STARTING_NEW), (Phase.STARTING_NEW, Phase.WARMING),
        (Phase.WARMING, Phase.SHADOWING), (Phase.SHADOWING, Phase.PROMOTING),
        (Phase.PROMOTING, Phase.POST_PROMOTION), (Phase.POST_PROMOTION, Phase.DRAINING_OLD),
        (Phase.DRAINING_OLD, Phase.DONE)]
    assert [t.at_unix for t in s.history] == [T0, T0 + 2, T0 + 4, T0 + 6, T0 + 7, T0 + 57,
                                               T0 + 95]
    assert "12/10 samples" in s.history[3].reason and "kept for a rollback" in s.history[-1].reason


@pytest.mark.parametrize(("observed", "why"), [
    ({"new": container(state="exited", exit_code=1)}, "exited with code 1 before it was ready"),
    ({"new": container(), "warmup": WarmupResult(healthy=True, models=("other",))},
     "serves ['other'], not the old one's ['tiny']"),
])
@pytest.mark.parametrize("keep_failed", [False, True])
def test_warmup_failure_fails_with_log_tail(observed, why, keep_failed) -> None:
    s = state_in(Phase.WARMING, spec={"keep_failed": keep_failed})
    s, action = advance(s, obs(routes=routes(), **observed), T0 + 5)
    assert s.phase is Phase.ABORTING and s.end_phase is Phase.FAILED and why in (s.error or "")
    assert "new_logs" in needs(s)
    info = observed["new"]
    s, action = advance(s, obs(routes=routes(), new=info, new_logs="CUDA out of memory"),
                        T0 + 6)
    assert s.log_tail == "CUDA out of memory"
    if keep_failed:
        assert s.phase is Phase.FAILED and "kept (--keep-failed)" in s.history[-1].reason
        return
    assert action == RemoveContainer(info.id)
    s, action = advance(s, obs(routes=routes(), new=None), T0 + 7)
    assert s.phase is Phase.FAILED and s.new is not None and s.new.removed
    assert why in s.history[-1].reason


def test_new_container_gone_fails_at_once() -> None:
    s, action = advance(state_in(Phase.WARMING), obs(routes=routes(), new=None), T0 + 5)
    assert s.phase is Phase.FAILED and isinstance(action, Wait)
    assert "the new container disappeared before it was ready" in s.history[-1].reason


def test_never_healthy_fails_at_the_deadline_and_old_is_never_stopped() -> None:
    s = started()
    actions = []
    s, a = advance(s, obs(routes=routes(), new=container(), new_url=NEW_URL), T0 + 1)
    for t in range(2, 62, 10):
        s, a = advance(s, obs(routes=routes(), new=container(),
                              warmup=WarmupResult(error="/health: connection refused")), T0 + t)
        actions.append(a)
    assert s.phase is Phase.WARMING
    s, a = advance(s, obs(routes=routes(), new=container(),
                          warmup=WarmupResult(error="/health: connection refused")), T0 + 60)
    assert s.phase is Phase.ABORTING
    assert "not ready within 60s: /health: connection refused" in (s.error or "")
    assert not any(isinstance(x, (StopContainer, StartContainer)) for x in actions + [a])


def test_analysis_timeout_aborts_and_removes_new() -> None:
    s = state_in(Phase.SHADOWING, deadline_unix=T0 + 100)
    shadowed = routes(OLD_URL, NEW_URL, version=5)
    s, a = advance(s, obs(routes=shadowed, gate=gate("inconclusive", 3), new=container()),
                   T0 + 100)
    assert s.phase is Phase.ABORTING and s.end_phase is Phase.ABORTED
    assert "analysis timeout after 100s (gate inconclusive, 3/10 samples)" in (s.error or "")
    assert a == SetRoutes(OLD_URL, None, None, 5)  # the same step takes the shadow away
    s, a = advance(s, obs(routes=routes(version=6), new=container()), T0 + 101)
    assert a == RemoveContainer("new-id-0002") and "new_logs" not in needs(s)
    s, a = advance(s, obs(routes=routes(version=6), new=None), T0 + 102)
    assert s.phase is Phase.ABORTED


def test_gate_fail_while_shadowing_aborts_after_the_failure_limit() -> None:
    """Three failing evaluations in a row (the default limit) abort; one that does not
    fail in between starts the count again."""
    s = state_in(Phase.SHADOWING, deadline_unix=T0 + 100)
    failing = gate("fail", 40, "match rate 0.42 < 0.90")
    at = T0 + 9
    for verdict in (failing, failing, gate("inconclusive", 41), failing, failing):
        s, a = advance(s, obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=verdict),
                       at)
        assert s.phase is Phase.SHADOWING and isinstance(a, Wait)
        at += 1
    assert s.gate_failures == 2
    s, a = advance(s, obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=failing), at)
    assert s.phase is Phase.ABORTING and s.end_phase is Phase.ABORTED
    assert "gate failed while shadowing (3 evaluations in a row): match rate 0.42 < 0.90" \
        in (s.error or "")
    assert a == SetRoutes(OLD_URL, None, None, 1)


def test_the_evidence_starts_after_the_analysis_delay() -> None:
    s = state_in(Phase.WARMING, spec={"analysis_delay_s": 7.0})
    s, _ = advance(s, obs(routes=routes(), new=container(), warmup=READY), T0 + 5)
    assert s.phase is Phase.SHADOWING and s.analysis_since_unix == T0 + 12
    assert s.evidence is not None and s.evidence.since_unix == T0 + 12


def test_gate_pass_below_min_samples_waits() -> None:
    s = state_in(Phase.SHADOWING, spec={"min_samples": 100}, deadline_unix=T0 + 100)
    s, a = advance(s, obs(routes=routes(OLD_URL, NEW_URL), gate=gate("pass", 99)), T0 + 9)
    assert s.phase is Phase.SHADOWING and isinstance(a, Wait)


def test_manual_promote_and_force() -> None:
    s = state_in(Phase.SHADOWING, spec={"auto_promote": False}, deadline_unix=T0 + 100)
    shadowed = routes(OLD_URL, NEW_URL, version=2)
    s, a = advance(s, obs(routes=shadowed, gate=gate("inconclusive", 2, "2 < 50 samples")),
                   T0 + 1)
    with pytest.raises(CommandRefused, match=r"inconclusive, 2/10 samples; promote --force "
                                             r"skips the gate. Not passed yet:\n  - 2 < 50"):
        command(s, "promote")
    # one line per check still holding it, none for those passed (it was one long line)
    many = replace(s, reasons=("pass: match rate 1.000 " + "x" * 300,
                               "inconclusive: TTFT p99 new/old 1.01 (bounds 0.8..1.3)",
                               "pass: error rate " + "y" * 300))
    with pytest.raises(CommandRefused) as refused:
        command(many, "promote")
    lines = str(refused.value).splitlines()
    assert lines[1:] == ["  - inconclusive: TTFT p99 new/old 1.01 (bounds 0.8..1.3)"]
    assert max(len(line) for line in lines) < 120
    forced = command(s, "force_promote")
    assert needs(forced) == {"routes", "new"}  # no gate to wait for before the switch
    s2, a = advance(forced, obs(routes=shadowed), T0 + 2)
    assert s2.phase is Phase.PROMOTING and "--force" in s2.history[-1].reason
    assert a == SetRoutes(NEW_URL, OLD_URL, None, 2) and s2.pending is None
    s, a = advance(s, obs(routes=shadowed, gate=gate("pass", 10)), T0 + 3)
    assert s.phase is Phase.SHADOWING  # no automatic promotion
    s, a = advance(command(s, "promote"), obs(routes=shadowed), T0 + 4)
    assert s.phase is Phase.PROMOTING and "by the operator" in s.history[-1].reason


@pytest.mark.parametrize("phase", [Phase.BACKING_UP, Phase.STARTING_NEW, Phase.WARMING,
                                   Phase.SHADOWING])
def test_abort_before_promotion(phase) -> None:
    s = command(state_in(phase), "abort")
    assert needs(s) == {"routes", "new"}
    s, a = advance(s, obs(routes=routes(OLD_URL, s.new.url if s.new else None), new=None), T0)
    if s.new is not None:
        assert a == SetRoutes(OLD_URL, None, None, 1)
        s, a = advance(s, obs(routes=routes(version=2), new=None), T0 + 1)
    assert s.phase is Phase.ABORTED and s.history[-2].reason == "aborted by the operator"


@pytest.mark.parametrize(("phase", "cmd", "message"), [
    (Phase.POST_PROMOTION, "abort", "roll back instead"),
    (Phase.SHADOWING, "rollback", "abort it instead"),
    (Phase.WARMING, "force_promote", "not ready to take traffic"),
    (Phase.POST_PROMOTION, "promote", "already promoted"),
    (Phase.ABORTED, "rollback", "does not apply"),
    (Phase.ROLLING_BACK, "abort", "does not apply"),
])
def test_commands_refused_where_they_do_not_apply(phase, cmd, message) -> None:
    with pytest.raises(CommandRefused, match=message):
        command(state_in(phase), cmd)


def test_second_start_refused_while_one_runs() -> None:
    running = started()
    with pytest.raises(CutoverRunning, match="cutover c1 is still starting_new"):
        begin(spec(), "c2", old_endpoint(), T0, running)
    ended = replace(running, phase=Phase.ABORTED)
    assert begin(spec(), "c2", old_endpoint(), T0, ended).id == "c2"


def test_routes_changed_by_another_writer_stop_the_cutover() -> None:
    s = state_in(Phase.SHADOWING, deadline_unix=T0 + 100)
    s, a = advance(s, obs(routes=routes("http://other:9000", NEW_URL)), T0 + 1)
    assert s.phase is Phase.FAILED and isinstance(a, Wait)
    assert "'http://other:9000'" in (s.error or "") and "nothing more is done" in s.error


def test_route_conflict_is_retried_with_the_new_version() -> None:
    s = state_in(Phase.PROMOTING)
    failure = ActionFailure("SetRoutes", "routes are at version 4, not 3", transient=True)
    s, a = advance(s, obs(routes=routes(OLD_URL, NEW_URL, version=4), failure=failure), T0)
    assert a == SetRoutes(NEW_URL, OLD_URL, None, 4)
    assert s.note == "SetRoutes will be retried: routes are at version 4, not 3"


def test_backup_then_start_and_backup_failure() -> None:
    s = started(backup_image="/backups/old.tar")
    assert s.phase is Phase.BACKING_UP
    s1, a = advance(s, obs(), T0)
    assert a == SaveImage("vllm:old", "/backups/old.tar")
    s1, a = advance(s1, obs(saved_bytes=12345), T0 + 3)
    assert s1.phase is Phase.STARTING_NEW and s1.backup_bytes == 12345
    failure = ActionFailure("SaveImage", "No space left on device")
    s2, a = advance(s, obs(failure=failure), T0 + 3)
    assert s2.phase is Phase.ABORTING and "No space left on device" in (s2.error or "")
    s2, a = advance(s2, obs(routes=routes(), new=None, new_logs=None), T0 + 4)
    assert s2.phase is Phase.FAILED and "no new container was created" in s2.history[-1].reason


def test_create_failure_fails_and_adopt_mode_skips_containers() -> None:
    s = started()
    s, a = advance(s, obs(routes=routes(), new=None,
                          failure=ActionFailure("CreateNew", "GPU 1 is held by vllm-old")), T0)
    assert s.phase is Phase.FAILED and "GPU 1 is held by vllm-old" in (s.error or "")
    assert "no new container was created" in s.history[-1].reason
    adopt = started(old=None, new_image=None, new_url=NEW_URL)
    assert adopt.phase is Phase.WARMING and needs(adopt) == {"routes", "warmup"}
    adopt, a = advance(adopt, obs(routes=routes(), warmup=READY), T0 + 1)
    assert adopt.phase is Phase.SHADOWING and a == SetRoutes(OLD_URL, NEW_URL, None, 1)
    drained = state_in(Phase.DRAINING_OLD, spec={"old": None, "new_image": None,
                                                  "new_url": NEW_URL}, drained_unix=T0)
    drained, a = advance(drained, obs(routes=routes(NEW_URL), inflight={}), T0 + 30)
    assert drained.phase is Phase.DONE and "no container of ours" in drained.history[-1].reason


def test_creation_retries_an_unreachable_engine_until_the_deadline() -> None:
    s = started()
    late, a = advance(s, obs(routes=routes(), new=None), T0 + 61)
    # The deadline holds in every phase, even for a container never tried (issue 24).
    assert late.phase is Phase.FAILED and "none was created" in (late.error or "")
    assert a == Wait() and "no new container was created" in late.history[-1].reason
    down = ActionFailure("CreateNew", "Docker daemon unreachable", transient=True)
    s1, a = advance(s, obs(routes=routes(), new=None, failure=down), T0 + 30)
    assert isinstance(a, CreateNew) and "will be retried" in (s1.note or "")
    s2, a = advance(s1, obs(routes=routes(), new=None, failure=down), T0 + 61)
    assert s2.phase is Phase.FAILED
    assert "not running at an address within 60s (none was created; CreateNew will be retried: Docker daemon unreachable" in (s2.error or "")


def test_shadowing_says_which_check_it_waits_for_and_how_long() -> None:
    """The binding check and the time it needs at the rate seen since the evidence began;
    from the first look on, it says when that is beyond the analysis time left."""
    s = state_in(Phase.SHADOWING, analysis_since_unix=T0, deadline_unix=T0 + 1800)
    checks = (Check("max_ttft_p99_ratio", "inconclusive", "", need=Need(1440)),
              Check("match_rate", "pass", ""),
              Check("max_ttft_p50_ratio", "inconclusive", "", need=Need(12)))
    look = GateView("inconclusive", (), 240, 50, checks)
    s, _ = advance(s, obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=look), T0 + 60)
    assert s.waiting_for == "waiting for TTFT p99: about 6 min at 4.0 req/s"
    assert s.decision_in_s == 1440 / 4.0  # the estimate in seconds, for /metrics
    assert type(s).from_json(s.to_json()).decision_in_s == 360.0  # persisted and checked
    short = replace(s, deadline_unix=T0 + 120)  # one minute left, six needed
    s, _ = advance(short, obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=look),
                   T0 + 60)
    assert s.phase is Phase.SHADOWING
    assert s.waiting_for is not None and s.waiting_for.endswith(
        "more than the analysis timeout left")
    decided = GateView("pass", (), 300, 50, (Check("x", "pass", ""),))
    s, _ = advance(replace(s, spec=replace(s.spec, auto_promote=False)),
                   obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=decided), T0 + 70)
    assert s.waiting_for is None and s.decision_in_s is None


def _waits(at: float, more: int | None, rate: float = 100.0,
           check: str = "match_rate") -> Observation:
    """Shadowing at `rate` requests/s since T0, the gate waiting on `check` for `more`
    samples (None: not decidable within 64x)."""
    samples = int((at - T0) * rate)
    gate = GateView("inconclusive", (), samples, samples,
                    (Check(check, "inconclusive", "", need=Need(more)),))
    return obs(routes=routes(OLD_URL, NEW_URL), new=container(), gate=gate)


def test_a_gate_hopeless_for_a_minute_ends_the_shadowing() -> None:
    """Needing more than four times the analysis time left on every look for 60 s aborts
    with the estimate as the reason; a look that is not hopeless starts the minute again."""
    s = state_in(Phase.SHADOWING, analysis_since_unix=T0, deadline_unix=T0 + 600)
    s, _ = advance(s, _waits(T0 + 60, 300000), T0 + 60)  # 50 min needed, 9 left
    assert s.phase is Phase.SHADOWING and s.hopeless_since_unix == T0 + 60
    s, _ = advance(s, _waits(T0 + 90, 30), T0 + 90)
    assert s.phase is Phase.SHADOWING and s.hopeless_since_unix is None
    for at in (T0 + 100, T0 + 130, T0 + 159):
        s, _ = advance(s, _waits(at, 300000), at)
        assert s.phase is Phase.SHADOWING and s.hopeless_since_unix == T0 + 100
    s, a = advance(s, _waits(T0 + 160, 300000), T0 + 160)
    assert s.phase is Phase.ABORTING and s.end_phase is Phase.ABORTED
    assert "the gate cannot decide before the analysis timeout (440s left of" in (s.error or "")
    assert "match rate needs about 300000 more samples, 50 min at 100.0 req/s" in (s.error or "")
    assert a == SetRoutes(OLD_URL, None, None, 1)


def test_a_gate_merely_slower_than_the_time_left_waits_for_the_timeout() -> None:
    """Within four times the time left the estimate may be wrong in the gate's favour: no
    early end, only the line saying so."""
    s = state_in(Phase.SHADOWING, analysis_since_unix=T0, deadline_unix=T0 + 600)
    for at in (T0 + 60, T0 + 150, T0 + 250):  # 600 s needed; 540, 450, 350 s left
        s, _ = advance(s, _waits(at, 60000), at)
        assert s.phase is Phase.SHADOWING and s.hopeless_since_unix is None
    assert s.waiting_for is not None and "more than the analysis timeout left" in s.waiting_for


def test_a_latency_tail_ends_early_only_when_undecidable_on_enough_samples() -> None:
    """A p99 is judged on the newest 5,000 requests: a large need says nothing of when it
    decides (no early end), 'not decidable within 64x' on 5,000 samples does; under 5,000
    its projection swings tenfold between looks, so not even that ends it early, and the
    analysis timeout still does."""
    p99 = "max_ttft_p99_ratio"
    s = state_in(Phase.SHADOWING, analysis_since_unix=T0, deadline_unix=T0 + 600)
    for at in (T0 + 60, T0 + 100, T0 + 160):
        s, _ = advance(s, _waits(at, 10**7, check=p99), at)
        assert s.phase is Phase.SHADOWING and s.hopeless_since_unix is None
    for at in (T0 + 170, T0 + 200):
        s, _ = advance(s, _waits(at, None, check=p99), at)
    s, _ = advance(s, _waits(T0 + 230, None, check=p99), T0 + 230)
    assert s.phase is Phase.ABORTING
    assert "TTFT p99 is not decidable within 64x the 23000 samples" in (s.error or "")

    s = state_in(Phase.SHADOWING, analysis_since_unix=T0, deadline_unix=T0 + 600)
    for at in (T0 + 10 * i for i in range(1, 60)):
        s, _ = advance(s, _waits(at, None, rate=3.0, check=p99), at)
        assert s.phase is Phase.SHADOWING and s.hopeless_since_unix is None
    assert "not decidable within 64x" in (s.waiting_for or "")
    s, _ = advance(s, _waits(T0 + 600, None, rate=3.0, check=p99), T0 + 600)
    assert s.phase is Phase.ABORTING and "analysis timeout after" in (s.error or "")
