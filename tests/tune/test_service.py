"""The tune service around the race: a restart mid-race, and the start request's checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.cutover.control import RoutesView
from proxy.cutover.shell.service import CutoverService
from proxy.gate.verdict import GateCriteria
from proxy.statefile import StateFile
from proxy.tune.service import SECTION, TuneRefused, TuneService
from proxy.tune.spec import TuneSpec, TuneSpecError
from tests.cutover.fakes import FakeControl

OLD = "http://127.0.0.1:9001"


def _service(path: Path) -> tuple[TuneService, StateFile]:
    state = StateFile(str(path))
    control = FakeControl(RoutesView(1, OLD, None, None))
    return TuneService(state, control, CutoverService(state, control, None),
                       GateCriteria()), state


async def test_a_proxy_restarted_mid_race_ends_the_race_old_still_serving(
        tmp_path: Path) -> None:
    state = StateFile(str(tmp_path / "state.json"))
    state.put(SECTION, {"id": "abcd", "phase": "racing", "old_url": OLD, "winner": None,
                        "history": [], "reason": "racing",
                        "candidates": [{"name": "a", "url": "http://a:1", "state": "racing",
                                        "reason": "", "requests": 12, "verdict": None}]})
    state.close()
    service, reopened = _service(tmp_path / "state.json")
    await service.open()
    try:
        status = service.status()
        assert status["phase"] == "aborted" and status["terminal"]
        assert "restarted" in status["reason"]
        assert status["candidates"][0]["name"] == "a"
        assert reopened.get(SECTION)["phase"] == "aborted"  # persisted: ends once
        assert service.racing() == {}
        with pytest.raises(TuneRefused, match="no tune is running"):
            await service.abort()
    finally:
        await service.close()


async def test_no_tune_yet_answers_an_empty_status(tmp_path: Path) -> None:
    service, _ = _service(tmp_path / "state.json")
    await service.open()
    try:
        assert service.status() == {"phase": None, "winner": None, "candidates": [],
                                    "terminal": True}
    finally:
        await service.close()


@pytest.mark.parametrize(("body", "quoted"), [
    ({"candidates": []}, "non-empty"),
    ({"candidates": [{"name": "a", "url": "ftp://x"}]}, "ftp://x"),
    ({"candidates": [{"name": "a b", "url": "http://x:1"}]}, "'a b'"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}, {"name": "a", "url": "http://y:1"}]},
     "given twice"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "promote": "worst"}, "'worst'"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "sample_rate": 0}, "0"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "gate": {"min_sample": 3}},
     "min_sample"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "gate": {"confidence": 2}}, "2"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "cutover": {"new_url": "x"}},
     "new_url"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "max_duration_s": -1}, "-1"),
])
def test_bad_start_requests_are_refused_quoting_the_value(body: dict[str, object],
                                                          quoted: str) -> None:
    with pytest.raises(TuneSpecError, match=quoted.replace("(", r"\(")):
        TuneSpec.from_json(body)


def test_the_race_criteria_split_the_proxys_gate_over_the_candidates() -> None:
    spec = TuneSpec.from_json({"candidates": [{"name": n, "url": f"http://{n}:1"}
                                              for n in "abcde"], "gate": {"min_samples": 7}})
    criteria = spec.criteria(GateCriteria(confidence=0.9))
    assert criteria.gate.min_samples == 7
    assert criteria.per_candidate(5).confidence == pytest.approx(1 - 0.1 / 5)
    assert spec.promotion("http://a:1").new_url == "http://a:1"


MADE = [{"name": "a", "args": ["--x", "1"]}, {"name": "b", "args": [], "env": {"K": "v"}}]


@pytest.mark.parametrize(("body", "quoted"), [
    ({"candidates": MADE}, "give old"),
    ({"candidates": [{"name": "a", "url": "http://x:1"}], "old": "vllm"}, "['old']"),
    ({"candidates": [*MADE, {"name": "c", "url": "http://x:1"}], "old": "v"}, "mixed"),
    ({"candidates": [{"name": "a", "args": ["serve"]}], "old": "v"}, "'serve'"),
    ({"candidates": [{"name": "a", "args": "--x"}], "old": "v"}, "'--x'"),
    ({"candidates": [{"name": "a", "env": {"1X": "v"}}], "old": "v"}, "1X"),
    ({"candidates": MADE, "old": "v", "new_gpus": [["2", "3"], ["3"]]}, "'3'"),
    ({"candidates": MADE, "old": "v", "new_gpus": ["2,3"]}, "'2,3'"),
    ({"candidates": MADE, "old": "v", "new_gpus": [["2"]], "parallel": 2}, "parallel 2"),
    ({"candidates": MADE, "old": "v", "parallel": 0}, "0"),
    ({"candidates": MADE, "old": " "}, "' '"),
])
def test_bad_container_mode_requests_are_refused_quoting_the_value(
        body: dict[str, object], quoted: str) -> None:
    with pytest.raises(TuneSpecError, match=re.escape(quoted)):
        TuneSpec.from_json(body)


def test_container_mode_places_default_to_the_gpu_sets_else_every_candidate() -> None:
    spec = TuneSpec.from_json({"candidates": MADE, "old": "vllm"})
    assert spec.containers and spec.places == 2 and spec.new_image is None
    spec = TuneSpec.from_json({"candidates": MADE, "old": "vllm", "new_gpus": [["2"]]})
    assert spec.places == 1
    again = TuneSpec.from_json({k: v for k, v in spec.to_json().items()
                                if v is not None}, None)
    assert again == spec
    promotion = spec.promotion("http://w:1", "0123abcd")
    assert promotion.old == "0123abcd" and promotion.adopt


async def test_container_mode_without_a_driver_is_refused_501(tmp_path: Path) -> None:
    service, _ = _service(tmp_path / "state.json")
    await service.open()
    try:
        with pytest.raises(TuneRefused, match="--driver docker") as refused:
            await service.start(TuneSpec.from_json({"candidates": MADE, "old": "vllm"}))
        assert refused.value.status == 501
        assert service.state is None  # nothing started
    finally:
        await service.close()


async def test_a_proxy_restarted_mid_race_removes_the_listed_candidate_containers(
        tmp_path: Path) -> None:
    """Listed by name before they are created: removed even if never recorded as made."""
    from tests.cutover.fakes import FakeDriver

    state = StateFile(str(tmp_path / "state.json"))
    state.put(SECTION, {"id": "abcd", "phase": "racing", "old_url": OLD, "winner": None,
                        "history": [], "reason": "racing", "candidates": [],
                        "containers": {"a": {"container": "vllm-tune-abcd-0-a", "url": "u"},
                                       "b": {"container": "vllm-tune-abcd-1-b"},
                                       "c": {"container": "vllm-tune-abcd-2-c",
                                             "removed": True}}})
    state.close()
    reopened = StateFile(str(tmp_path / "state.json"))
    control = FakeControl(RoutesView(1, OLD, None, None))
    driver = FakeDriver(new_url="http://new:1", old_url=OLD)
    service = TuneService(reopened, control, CutoverService(reopened, control, driver),
                          GateCriteria())
    await service.open()
    try:
        assert [c[1] for c in driver.calls if c[0] == "remove"] == [
            "vllm-tune-abcd-0-a", "vllm-tune-abcd-1-b"]
        status = service.status()
        assert status["phase"] == "aborted"
        assert reopened.get(SECTION)["containers"]["b"]["removed"] is True
    finally:
        await service.close()
