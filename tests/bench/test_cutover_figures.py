"""The cutover benchmark's arithmetic on hand-made outcomes: which probe counts as the first
answer from new, which requests overlap the switch, and the verdicts."""

from __future__ import annotations

import math

from _cutover_figures import (
    RoundMarks,
    Switch,
    failures,
    figures,
    first_answer,
    round_numbers,
    ttfts_ms,
)

from proxy.demo.steady import Outcome

OLD, NEW = "vllm-old", "vllm-new"


def probe(sent_s: float, took_s: float, fp: str, error: str | None = None) -> Outcome:
    return Outcome("completions", False, sent_s, took_s, took_s, 200, 1, error, fp)


def stream(sent_s: float, ttft_s: float, e2e_s: float = 0.4) -> Outcome:
    return Outcome("chat", True, sent_s, ttft_s, e2e_s, 200, 24, None)


def test_first_answer_is_the_earliest_answer_to_a_probe_sent_after_the_decision() -> None:
    probes = [probe(9.95, 0.10, NEW),  # sent before: not counted, though it answers after
              probe(10.01, 0.09, NEW),  # answered at 10.10
              probe(10.02, 0.05, NEW),  # answered at 10.07: the first
              probe(10.03, 0.01, NEW, error="answer_short"),  # failed: not an answer
              probe(10.00, 0.02, OLD)]
    first = first_answer(probes, NEW, 10.0)
    assert first is not None and first.started_s == 10.02
    assert first_answer(probes, NEW, 11.0) is None


def test_only_streams_overlapping_the_slice_count() -> None:
    steady = [stream(0.0, 0.05, e2e_s=0.5),  # ends at 0.5: before the slice
              stream(0.8, 0.30),  # overlaps [1, 3]
              stream(2.9, 0.07),  # overlaps
              stream(3.1, 0.90),  # starts after
              Outcome("completions", False, 2.0, 0.4, 0.4, 200, 24, None)]  # unstreamed
    assert ttfts_ms(steady, 1.0, 3.0) == [300.0, 70.0]


def _round() -> tuple[RoundMarks, list[Outcome], list[Outcome]]:
    marks = RoundMarks(0, control=(0.0, 8.0), switch_window=(10.0, 18.0),
                       promote=Switch(14.0, 14.01, 14.004),
                       rollback_running=Switch(30.0, 30.01, 30.002, 0.2),
                       rollback_stopped=Switch(60.0, 60.01, 60.002, 3.5))
    probes = [probe(t / 100, 0.045, OLD) for t in range(0, 1400, 5)]  # old until the switch
    probes += [probe(14.0 + t / 100, 0.045, NEW) for t in range(2, 1600, 5)]
    probes += [probe(30.25, 0.045, OLD), probe(63.8, 0.045, OLD)]
    steady = [stream(t / 10, 0.05) for t in range(700)]
    steady.append(stream(14.2, 0.15))  # the blip: 3x the control's worst
    return marks, steady, probes


def test_round_numbers() -> None:
    marks, steady, probes = _round()
    nums = round_numbers(marks, steady, probes, OLD, NEW)
    assert math.isclose(nums["promote_first_new_answer_ms"], 65.0)
    assert math.isclose(nums["promote_first_new_sent_ms"], 20.0)
    assert math.isclose(nums["promote_recorded_ms"], 4.0)
    # every probe sent after the decision went to new
    assert math.isnan(nums["promote_last_old_sent_ms"])
    assert math.isclose(nums["probe_control_median_ms"], 45.0)
    assert nums["new_before_promote"] == 0
    assert math.isclose(nums["switch_worst_ms"], 150.0)
    assert math.isclose(nums["control_worst_ms"], 50.0)
    assert math.isclose(nums["rollback_running_first_old_answer_ms"], 295.0)
    assert math.isclose(nums["rollback_running_machine_ms"], 200.0)
    assert math.isclose(nums["rollback_stopped_first_old_answer_ms"], 3845.0)


def test_figures_judge_each_target() -> None:
    marks, steady, probes = _round()
    nums = round_numbers(marks, steady, probes, OLD, NEW)
    table = {f.name: f for f in figures([nums], failed=0, answered=900)}
    assert table["decision -> first answer from new (request sent after it)"].verdict == "PASS"
    blip = table["worst streamed TTFT, promotion +-1 s"]
    assert math.isclose(blip.relation or 0.0, 3.0) and blip.verdict == "FAIL"  # x3 > x1.5
    assert table["old running: rollback_s (status)"].verdict == "PASS"
    assert table["old stopped: rollback_s (status)"].verdict == "-"  # informative
    assert table["failed or short answers of 900"].verdict == "PASS"
    assert {f.name: f for f in figures([nums], failed=2, answered=900)}[
        "failed or short answers of 900"].verdict == "FAIL"


def test_failures_are_counted_by_kind() -> None:
    steady = [stream(0.0, 0.05), Outcome("chat", True, 1.0, 0.05, 0.2, 200, 3, "stream_short")]
    probes = [probe(0.0, 0.04, OLD, error="http_502"), probe(1.0, 0.04, OLD)]
    assert failures(steady, probes) == {"stream_short": 1, "http_502": 1}
