"""The start request's validation and the state's JSON round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from proxy.cutover.model import CutoverState, Phase, StateError
from proxy.cutover.spec import CutoverSpec, SpecError, grace_from_command
from tests.cutover.states import NEW_URL, T0, spec, state_in


def test_spec_json_round_trip() -> None:
    s = spec(new_command=("serve", "/m", "--port", "8000"), new_env={"A": "1"},
             new_env_unset=("VLLM_USE_FBGEMM",), new_gpus=("1", "2"), remove_old=True,
             backup_image="/b/old.tar", shutdown_grace_s=12.5, old_url="http://old:8000/")
    data = json.loads(json.dumps(s.to_json()))
    assert CutoverSpec.from_json(data) == s
    assert s.old_url == "http://old:8000"  # normalised once, here


@pytest.mark.parametrize(("body", "quoted"), [
    ({"old": "a", "new_image": "x", "min_samples": 0}, "min_samples must be >= 1, got 0"),
    ({"old": "a", "new_image": "x", "analysis_timeout_s": -1}, "got -1.0"),
    ({"old": "a", "new_image": "x", "post_promotion_s": "10"}, "got '10'"),
    ({"old": "a", "new_image": "x", "remove_old": "yes"}, "true or false, got 'yes'"),
    ({"old": "a", "new_image": "x", "new_gpus": "0,1"}, "list of strings, got '0,1'"),
    ({"old": "a", "new_image": "x", "new_gpus": ["0", "a b"]}, "('0', 'a b')"),
    ({"old": "a", "new_image": "x", "new_env": {"1BAD": "v"}}, "'1BAD' is not valid"),
    ({"old": "a", "new_image": "x", "colour": "red"}, "unknown field(s) ['colour']"),
    ({"old": "a"}, "new_image=None, new_url=None"),
    ({"new_image": "x"}, "new_image 'x' needs old"),
    ({"new_url": "ftp://nope"}, "'ftp://nope'"),
    ({"new_url": NEW_URL, "new_gpus": ["1"]}, "{'new_gpus': ('1',)} only apply"),
    ({"new_url": NEW_URL, "old_url": NEW_URL + "/"}, "the same backend: 'http://new:8000'"),
    ({"new_url": NEW_URL, "backup_image": "/b"}, "backup_image '/b' needs old"),
    ({"old": " ", "new_image": "x"}, "old must not be empty, got ' '"),
    ({"old": "a", "new_image": "x", "min_samples": None}, "min_samples must not be null"),
    (["old"], "a JSON object, got ['old']"),
])
def test_spec_errors_quote_the_bad_value(body, quoted) -> None:
    with pytest.raises(SpecError) as info:
        CutoverSpec.from_json(body)
    assert quoted in str(info.value)


def test_adopt_mode_needs_no_old_container() -> None:
    s = CutoverSpec.from_json({"new_url": NEW_URL, "min_samples": 5})
    assert s.adopt and not s.needs_driver and s.old is None


@pytest.mark.parametrize("phase", list(Phase))
def test_state_json_round_trip_in_every_phase(phase) -> None:
    s = state_in(phase, verdict="inconclusive", reasons=("few samples",), samples=3,
                 pending="rollback" if phase.promoted else "abort", error="x",
                 log_tail="line 1\nline 2", drained_unix=T0 + 3, rollback_s=1.25,
                 end_phase=Phase.FAILED, backup_bytes=99, baseline_url="http://b:8000")
    text = json.dumps(s.to_json())
    back = CutoverState.from_json(json.loads(text))
    assert back == s
    assert [t.to_json() for t in back.history] == [t.to_json() for t in s.history]
    assert json.loads(text)["history"][0] == {"at_unix": T0, "from": None,
                                              "to": "starting_new",
                                              "reason": s.history[0].reason}


@pytest.mark.parametrize(("mutate", "quoted"), [
    (lambda d: d.update(schema=99), "schema 99 is not the supported 1"),
    (lambda d: d.update(phase="flying"), "unknown phase 'flying'"),
    (lambda d: d.update(pending="dance"), "cutover.pending must be one of"),
    (lambda d: d.update(whatever=1), "unknown field(s) ['whatever']"),
    (lambda d: d["spec"].update(min_samples=-3), "got -3"),
    (lambda d: d.pop("old"), "cutover.old must be a JSON object, got None"),
    (lambda d: d.update(new=[1]), "cutover.new must be a JSON object, got [1]"),
])
def test_bad_state_is_refused_with_the_value(mutate, quoted) -> None:
    data = state_in(Phase.SHADOWING).to_json()
    mutate(data)
    with pytest.raises(StateError) as info:
        CutoverState.from_json(data)
    assert quoted in str(info.value)


def test_moved_records_and_resets() -> None:
    s = replace(state_in(Phase.SHADOWING), pending="promote", note="n", deadline_unix=T0 + 9)
    m = s.moved(Phase.PROMOTING, "gate passes", T0 + 5)
    assert (m.pending, m.note, m.deadline_unix, m.phase_since_unix) == (None, None, None, T0 + 5)
    assert m.history[-1].to_json() == {"at_unix": T0 + 5, "from": "shadowing",
                                       "to": "promoting", "reason": "gate passes"}
    assert Phase.DONE.terminal and not Phase.ROLLING_BACK.terminal and Phase.DONE.promoted


@pytest.mark.parametrize(("command", "grace"), [
    (("serve", "m", "--shutdown-timeout", "60"), 65.0),
    (("serve", "m", "--shutdown-timeout=10"), 15.0),
    (("serve", "m", "--shutdown-timeout", "0"), None),
    (("serve", "m"), None),
    (("serve", "--shutdown-timeout", "soon"), None),
])
def test_grace_follows_vllm_shutdown_timeout(command, grace) -> None:
    assert grace_from_command(command) == grace
