from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from proxy.compare.types import ExchangeRecord
from proxy.report.model import build_report, latency_samples, report_json


def test_identical_backends_pass_with_no_divergence(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    # the gate's bounds hold at every look: a pass needs ~1,000 requests (errors <= 1 %)
    report = build_report(records_of(count=1800))
    doc = report_json(report)
    assert (doc["compared"], doc["diverged"]) == (1200, 0)  # 1800 records, 1/3 sampled
    assert doc["baseline"]["compared"] == 1200 and doc["baseline"]["diverged"] == 0
    assert doc["verdict"] == "pass", doc["reasons"]
    assert doc["shadow"]["sampled"] == 600
    assert report.shadow.match_rate == 1.0 and report.shadow.match_rate_ci[0] > 0.9
    json.dumps(doc)  # serialisable as is


def test_divergences_are_counted_with_positions_and_fail_the_gate(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    report = build_report(records_of(count=300, diverge_every=2))
    assert report.shadow.compared == 200
    # Every other record diverges, but only deterministic ones count.
    assert report.shadow.diverged == sum(1 for i in range(0, 300, 2) if i % 3 != 2)
    assert (
        min(report.shadow.first_divergence) >= 3 and report.shadow.close == report.shadow.diverged
    )
    assert report.gate.verdict == "fail"
    assert any("match rate" in r for r in report.gate.reasons)


def test_slower_new_version_shows_in_latency_rows_and_fails(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    report = build_report(records_of(count=150, new_slowdown=1.6))
    ttft = next(row for row in report.latency if row.metric == "ttft")
    assert ttft.p50_ratio is not None and 1.4 < ttft.p50_ratio < 1.8
    assert ttft.test is not None and ttft.test.p_value < 0.001 and ttft.test.effect_size > 0.5
    assert report.gate.verdict == "fail"
    assert any(r.startswith("fail: TTFT") for r in report.gate.reasons)


def test_no_baseline_and_too_few_samples_is_inconclusive(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    report = build_report(records_of(count=30, baseline=False))
    doc = report_json(report)
    assert doc["baseline"] is None and doc["verdict"] == "inconclusive"
    assert report.samples == 30


def test_shadow_errors_are_counted_per_kind(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    report = build_report(records_of(count=60, shadow_errors_every=5))
    assert report.shadow.errors == 12
    assert report.roles["shadow"].errors["http_5xx"] == 12
    assert report.roles["primary"].errors.total() == 0


def test_empty_record_set(records_of: Callable[..., list[ExchangeRecord]]) -> None:
    report = build_report([])
    doc = report_json(report)
    assert (doc["compared"], doc["diverged"], doc["baseline"], doc["verdict"]) == (
        0,
        0,
        None,
        "inconclusive",
    )


def test_sampled_requests_are_summarised_as_distributions(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    report = build_report(records_of(count=90))
    assert report.sampled["primary"].requests == 30 and report.sampled["shadow"].requests == 30
    assert report.sampled_length_test is not None  # identical lengths: no shift
    assert report.sampled_length_test.p_value > 0.5
    doc = report_json(report)
    assert doc["sampled"]["roles"]["new"]["mean_output_tokens"] == 20


def test_per_token_latency_only_from_streamed_answers(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    records = [
        replace(r, meta=replace(r.meta, stream=i % 2 == 0)) for i, r in enumerate(records_of(40))
    ]
    samples = latency_samples(records)["primary"]
    assert len(samples.e2e_s) == 20 and len(samples.ttft_s) == 20  # streamed only
    assert len(samples.itl_s) == 20 * 19 and min(samples.tpot_s) > 0
    assert len(samples.e2e_unstreamed_s) == 20 == len(samples.tpot_unstreamed_s)
    unstreamed = [c for r in records if not r.meta.stream for c in r.captures
                  if c.role == "primary"]
    assert sorted(samples.e2e_unstreamed_s) == sorted(c.e2e_s for c in unstreamed)
    assert sorted(samples.tpot_unstreamed_s) == sorted(
        c.e2e_s / c.output_tokens for c in unstreamed)  # type: ignore[operator]
    baseline_unstreamed = [replace(r, baseline_streamed=False) for r in records]
    baseline = latency_samples(baseline_unstreamed)["baseline"]
    # Asked unstreamed for the 20 streamed requests: a latency of neither family (not like
    # the shadow's unstreamed E2E), so only the 20 unstreamed requests give E2E samples;
    # every answer's length still counts.
    assert baseline.ttft_s == () and len(baseline.e2e_unstreamed_s) == 20
    assert len(baseline.output_tokens) == 40


def test_streamed_traffic_with_an_unstreamed_baseline_is_judged_on_streamed_latency(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    """The default baseline is asked unstreamed for streamed requests. Its E2E is no
    unstreamed sample: counted as one, the gate waited forever for the shadow's."""
    from proxy.gate.verdict import GateCriteria, GateInputs, evaluate

    records = [replace(r, baseline_streamed=False)
               for r in records_of(count=3000, seed=3)]
    criteria = GateCriteria(min_samples=20, min_baseline_samples=20)
    verdict = evaluate(GateInputs.from_records(records), criteria)
    judged = verdict.details["latency"]["families_judged"]
    assert judged == ["streamed"], verdict.reasons
    assert not [r for r in verdict.reasons if "unstreamed" in r], verdict.reasons
    assert verdict.details["latency"]["reference"]["ttft"] == "primary"


def test_the_lead_line_says_unchanged_not_minus_zero(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    """A median change that rounds to 0 % reads "unchanged" (the walkthrough's report said
    "TTFT p50 -0%"); a real one keeps its sign."""
    from proxy.report.model import lead_line

    same = build_report(records_of(count=150))
    for ratio, shown in ((0.998, "TTFT p50 unchanged"), (1.004, "TTFT p50 unchanged"),
                         (0.97, "TTFT p50 -3%")):
        rows = [replace(r, p50_ratio=ratio) if r.metric == "ttft" else r for r in same.latency]
        assert shown in lead_line(replace(same, latency=type(same.latency)(rows)))
    slower = build_report(records_of(count=150, new_slowdown=1.6))
    ratio = next(r.p50_ratio for r in slower.latency if r.metric == "ttft")
    assert ratio is not None
    assert f"TTFT p50 +{round((ratio - 1) * 100)}%" in lead_line(slower)
