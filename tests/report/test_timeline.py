"""The gate re-judged over time: looks evenly spaced, the last the report's verdict."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from proxy.compare.types import ExchangeRecord
from proxy.gate.verdict import GateCriteria, GateInputs, evaluate
from proxy.report.timeline import MAX_LOOKS, look_sizes, timeline_of

Records = Callable[..., list[ExchangeRecord]]


def test_looks_are_evenly_spaced_capped_and_end_with_every_record() -> None:
    sizes = look_sizes(1600)
    assert len(sizes) == MAX_LOOKS and sizes[-1] == 1600 and sizes[0] == 100
    assert {b - a for a, b in itertools.pairwise(sizes)} == {100}
    assert look_sizes(5) == [1, 2, 3, 4, 5] and look_sizes(0) == []
    assert look_sizes(37, looks=4) == [10, 19, 28, 37]


def test_the_verdict_turns_as_evidence_accumulates(records_of: Records) -> None:
    records = records_of(count=1800)
    looks = timeline_of(list(reversed(records))).looks  # in time order, however stored
    assert [look.records for look in looks] == look_sizes(1800)
    assert looks[0].verdict == "inconclusive" and looks[-1].verdict == "pass"
    assert looks[-1].verdict == evaluate(GateInputs.from_records(records)).verdict
    assert looks[0].elapsed_s == 112 and looks[-1].elapsed_s == 1799  # one record a second
    assert looks[-1].match_rate == 1.0 and looks[-1].baseline_match_rate == 1.0


def test_ratios_follow_the_slower_version(records_of: Records) -> None:
    timeline = timeline_of(records_of(count=300, new_slowdown=1.5))
    last = timeline.looks[-1]
    assert last.p50_ratios["ttft"] == pytest.approx(1.5, abs=0.05)
    assert last.baseline_p50_ratios["ttft"] == pytest.approx(1.0, abs=0.05)
    assert last.verdict == "fail" and last.deciding[0].startswith("fail: TTFT")
    assert timeline.ratio_metrics == ("ttft", "tpot")
    assert timeline.p50_limits["ttft"] == 1.1
    limits = timeline_of(records_of(count=30), GateCriteria(max_ttft_p50_ratio=1.5)).p50_limits
    assert limits["ttft"] == 1.5


def test_without_baseline_no_noise_rates(records_of: Records) -> None:
    looks = timeline_of(records_of(count=40, baseline=False)).looks
    assert all(look.baseline_match_rate is None for look in looks)
    assert all(look.baseline_p50_ratios["ttft"] is None for look in looks)


def test_admission_counts_at_each_look_are_those_flushed_by_then(records_of: Records) -> None:
    records = records_of(count=1800)  # started at 1000..2799
    shedding = [(500.0, "eligible", 1800), (2500.0, "eligible", 9000),
                (2500.0, "overload", 9000)]
    looks = timeline_of(records, admission=shedding).looks
    assert looks[-1].verdict == "inconclusive"
    assert next(r for r in looks[-1].deciding if "mirrored" in r).startswith(
        "inconclusive: 1800 of 10800 sampled requests mirrored (16.7%, minimum 50%)")
    before = [look for look in looks if 1000 + look.elapsed_s < 2500]
    assert before and not [r for look in before for r in look.reasons if "mirrored" in r
                           and not r.startswith("pass:")]
    assert any(look.verdict == "pass" for look in before)
    late = [(9999.0, "eligible", 1800), (9999.0, "overload", 1700)]
    assert timeline_of(records, admission=late).looks[-1].verdict == "inconclusive"


def test_no_records_no_looks() -> None:
    assert timeline_of([]).looks == ()
