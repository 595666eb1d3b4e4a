"""The pure core after the promotion: post-promotion gate, rollback, draining the old one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.cutover.machine import CommandRefused, advance, command, needs
from proxy.cutover.model import Phase
from proxy.cutover.steps import RemoveContainer, SetRoutes, StartContainer, Wait
from tests.cutover import states
from tests.cutover.states import NEW_URL, OLD_URL, T0, container, gate, obs, routes, state_in

OLD_RUNNING = container("old-id-0001")
OLD_EXITED = container("old-id-0001", "exited", exit_code=0)


def test_remove_old_at_the_end() -> None:
    s = state_in(Phase.DRAINING_OLD, spec={"remove_old": True}, drained_unix=T0,
                 old_stopped=True)
    alone = routes(NEW_URL)
    s, action = advance(s, obs(routes=alone, inflight={}, old=OLD_EXITED), T0 + 100)
    assert action == RemoveContainer("old-id-0001")
    s, action = advance(s, obs(routes=alone, inflight={}, old=None), T0 + 101)
    assert s.phase is Phase.DONE and s.old.removed and "removed" in s.history[-1].reason
    with pytest.raises(CommandRefused, match="removed"):
        command(s, "rollback")


def test_post_promotion_gate_fail_rolls_back() -> None:
    s = state_in(Phase.POST_PROMOTION, spec={"failure_limit": 1}, deadline_unix=T0 + 60)
    promoted = routes(NEW_URL, OLD_URL, version=3)
    s, a = advance(s, obs(routes=promoted, new=container(), gate=gate("fail", 30, "TTFT p99")),
                   T0 + 20)
    assert s.phase is Phase.ROLLING_BACK and s.rollback_started_unix == T0 + 20
    assert needs(s) >= {"old", "old_health", "inflight", "new"}
    s, a = advance(s, obs(routes=promoted, old=OLD_RUNNING, old_healthy=True, inflight={},
                          new=container()), T0 + 20.5)
    assert a == SetRoutes(OLD_URL, None, None, 3)
    back = routes(OLD_URL, version=4)
    s, a = advance(s, obs(routes=back, old=OLD_RUNNING, old_healthy=True,
                          inflight={NEW_URL: 1}, new=container()), T0 + 21)
    assert s.rollback_s == 1.0 and isinstance(a, Wait)  # a stream on new finishes first
    s, a = advance(s, obs(routes=back, old=OLD_RUNNING, old_healthy=True, inflight={},
                          new=container()), T0 + 22)
    assert a == RemoveContainer("new-id-0002")
    s, a = advance(s, obs(routes=back, old=OLD_RUNNING, old_healthy=True, inflight={},
                          new=None), T0 + 23)
    assert s.phase is Phase.ROLLED_BACK and "1.00s after the rollback began" in \
        s.history[-1].reason and s.rollback_s == 1.0


@pytest.mark.parametrize("phase", [Phase.PROMOTING, Phase.POST_PROMOTION,
                                   Phase.DRAINING_OLD, Phase.DONE])
def test_rollback_from_any_phase_after_promotion_starts_a_stopped_old(phase) -> None:
    s = command(state_in(phase, old_stopped=True), "rollback")
    promoted = routes(NEW_URL, version=7)
    s, a = advance(s, obs(routes=promoted, old=OLD_EXITED, inflight={}, new=container()), T0)
    assert s.phase is Phase.ROLLING_BACK and a == StartContainer("old-id-0001")
    s, a = advance(s, obs(routes=promoted, old=OLD_RUNNING, old_healthy=False, inflight={},
                          new=container()), T0 + 30)
    assert isinstance(a, Wait) and "waiting for old" in (s.note or "")  # not before healthy
    s, a = advance(s, obs(routes=promoted, old=OLD_RUNNING, old_healthy=True, inflight={},
                          new=container()), T0 + 42)
    assert a == SetRoutes(OLD_URL, None, None, 7)
    s, a = advance(s, obs(routes=routes(version=8), old=OLD_RUNNING, old_healthy=True,
                          inflight={}, new=container()), T0 + 42.25)
    assert s.rollback_s == 42.25


def test_rollback_fails_cleanly_when_old_is_gone_or_never_healthy() -> None:
    s = command(state_in(Phase.DONE), "rollback")
    s1, a = advance(s, obs(routes=routes(NEW_URL), old=None, new=container()), T0)
    assert s1.phase is Phase.FAILED and "no longer exists; new stays primary" in (s1.error or "")
    s2, a = advance(s, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_healthy=False), T0)
    s2, a = advance(s2, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_healthy=False), T0 + 61)
    assert s2.phase is Phase.FAILED and "did not answer /health, /v1/models and /version at" in (s2.error or "")
    assert isinstance(a, Wait)


def test_rollback_reaches_old_where_it_is_now_and_refuses_an_impostor() -> None:
    """Old restarted at another IP while another engine holds its former one (issue 24,
    item 1): clients go to old's current address, or nowhere new, never to the other."""
    from proxy.cutover.steps import Identity

    s = command(state_in(Phase.DONE, old=replace(state_in(Phase.DONE).old,
                                                 network="net")), "rollback")
    moved = "http://10.0.0.9:8000"
    s1, a = advance(s, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_url=moved,
                           old_healthy=True, new=container()), T0)
    assert a == SetRoutes(moved, None, None, 1) and s1.old.url == moved
    impostor = Identity(("other-model",), "9.9.9")
    s2, a = advance(s, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_healthy=True,
                           old_identity=impostor, new=container()), T0)
    assert s2.phase is Phase.FAILED and a == Wait()
    assert "is not old (it serves ['other-model']" in (s2.error or "")
    assert "new stays primary" in (s2.error or "")
    wrong_version = Identity(("tiny",), "9.9.9")
    s3, _ = advance(s, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_healthy=True,
                           old_identity=wrong_version, new=container()), T0)
    assert s3.phase is Phase.FAILED and "/version is '9.9.9', not '0.31.0'" in (s3.error or "")


def test_mirroring_to_old_stops_when_its_container_goes_or_moves() -> None:
    """After the promotion old is the shadow: once its container is gone or at another
    address, its former address gets no more mirrored prompts (issue 24, item 2)."""
    s = state_in(Phase.POST_PROMOTION)
    promoted = routes(NEW_URL, OLD_URL)
    same, a = advance(s, obs(routes=promoted, old=OLD_RUNNING, old_url=OLD_URL, new=container()),
                      T0 + 1)
    assert a == Wait() and same.mirror_off is None
    for old_now, old_url in ((None, None), (replace(OLD_RUNNING, state="exited"), None),
                             (OLD_RUNNING, "http://10.0.0.9:8000")):
        s1, a = advance(s, obs(routes=promoted, old=old_now, old_url=old_url, new=container()),
                        T0 + 1)
        assert a == SetRoutes(NEW_URL, None, None, 1), old_now
        assert "no more mirroring to http://old:8000" in (s1.mirror_off or "")
        _, a = advance(s1, obs(routes=routes(NEW_URL), old=OLD_RUNNING, old_url=OLD_URL,
                                new=container()), T0 + 2)
        assert a == Wait()  # not put back, even when old seems to be there again


def test_a_created_container_past_the_deadline_is_said_created_and_removed() -> None:
    """The daemon gone after the new container was created (not started): the deadline
    holds, and the end says what existed (issue 24, item 4)."""
    s = states.started()
    created = replace(container(), state="created")
    s1, a = advance(s, obs(routes=routes(), new=created, new_logs=""), T0 + 61)
    assert s1.phase is Phase.ABORTING and "is created" in (s1.error or "")
    assert a == RemoveContainer(created.id)
    s3, _ = advance(s1, obs(routes=routes(), new=None), T0 + 63)
    assert s3.phase is Phase.FAILED
    assert f"new container {created.name} (created) removed" in s3.history[-1].reason


def test_an_adopted_new_backend_that_stops_answering_is_rolled_back() -> None:
    """Adopt mode has no container to watch: after the promotion, new's /health failing
    rolls back at once (the chaos run found a dead new primary ending `done`)."""
    adopt = {"old": None, "new_image": None, "new_url": NEW_URL}
    s = state_in(Phase.POST_PROMOTION, spec=adopt)
    assert "new_health" in needs(s)
    promoted = routes(NEW_URL, OLD_URL)
    s1, _ = advance(s, obs(routes=promoted, new_healthy=True), T0 + 1)
    assert s1.phase is Phase.POST_PROMOTION
    s2, _ = advance(s, obs(routes=promoted, new_healthy=False), T0 + 1)
    assert s2.phase is Phase.ROLLING_BACK and "stopped answering /health" in (s2.error or "")
