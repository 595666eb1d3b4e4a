"""The fleet verdict from summed metrics (unit: a stub in place of Prometheus)."""

from __future__ import annotations

import json
import random

from proxy.evidence.metrics import TIME_BUCKETS_S
from proxy.fleet.judging import FleetEvidence, fleet_verdict, histogram_samples, read_evidence
from proxy.fleet.prometheus import Sample
from proxy.fleet.promql import FleetQueries, parse_selector
from proxy.gate.stats import percentile
from proxy.gate.verdict import GateCriteria, GateInputs, MatchCounts

CRITERIA = GateCriteria(min_samples=10, max_ttft_p50_ratio=None, max_ttft_p99_ratio=None,
                        max_tpot_p50_ratio=None, max_tpot_p99_ratio=None, max_length_shift=None,
                        max_error_rate_excess=0.2, max_e2e_unstreamed_p50_ratio=None,
                        max_e2e_unstreamed_p99_ratio=None, max_tpot_unstreamed_p50_ratio=None,
                        max_tpot_unstreamed_p99_ratio=None)


def _cumulative(values: list[float]) -> list[tuple[float, float]]:
    return [(b, sum(v <= b for v in values)) for b in TIME_BUCKETS_S] + \
        [(float("inf"), len(values))]


def test_histogram_samples_keep_counts_and_percentiles():
    rng = random.Random(7)
    values = [rng.lognormvariate(-3, 0.6) for _ in range(3000)]
    samples = histogram_samples(_cumulative(values))
    assert len(samples) == len(values)
    for q in (50, 99):
        truth = percentile(values, q)
        assert truth is not None
        assert abs(percentile(samples, q) - truth) / truth < 0.06  # a bucket is 12 % wide
    capped = histogram_samples(_cumulative(values), cap=300)
    assert 290 <= len(capped) <= 310  # scaled per bucket, rounded


def test_histogram_samples_edges():
    assert histogram_samples([]) == ()
    # +Inf bucket: at the last finite bound; lengths are whole tokens inside their bucket.
    assert histogram_samples([(1, 0), (2, 3), (3, 3), (float("inf"), 4)], integer=True) == \
        (2.0, 2.0, 2.0, 3.0)
    # increase() estimates may dip: never a negative count.
    assert len(histogram_samples([(1, 5.2), (2, 4.9), (float("inf"), 6.1)])) == 6


def _evidence(up: tuple[str, ...], down: tuple[str, ...], compared: int,
              diverged: int) -> FleetEvidence:
    inputs = GateInputs(new_vs_old=MatchCounts(compared, diverged),
                        requests={"primary": compared, "shadow": compared})
    return FleetEvidence(up, down, inputs)


def test_a_partial_or_empty_scrape_is_never_a_pass():
    assert fleet_verdict(_evidence(("a", "b"), (), 100, 0), CRITERIA)["verdict"] == "pass"
    partial = fleet_verdict(_evidence(("a",), ("b:8001",), 100, 0), CRITERIA)
    assert partial["verdict"] == "inconclusive"
    assert partial["reasons"][0].startswith("inconclusive: 1 of 2 sidecars not scraped")
    assert "b:8001" in partial["reasons"][0]
    few = fleet_verdict(_evidence(("a",), (), 100, 0), CRITERIA, min_targets=3)
    assert few["verdict"] == "inconclusive"
    empty = fleet_verdict(_evidence((), (), 0, 0), CRITERIA)
    assert empty["verdict"] == "inconclusive"
    # What the sidecars that answered show still fails.
    assert fleet_verdict(_evidence(("a",), ("b",), 100, 90), CRITERIA)["verdict"] == "fail"


class _Stub:
    """Answers each query by the metric name it mentions."""

    def __init__(self, answers: dict[str, list[Sample]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def query(self, promql: str) -> list[Sample]:
        self.asked.append(promql)
        return next((v for k, v in self.answers.items() if k in promql), [])


def test_read_evidence_sums_into_gate_inputs():
    stub = _Stub({
        "up{": [Sample({"instance": "a"}, 1), Sample({"instance": "b"}, 0)],
        "comparisons": [Sample({"against": "shadow", "outcome": "match"}, 40.4),
                        Sample({"against": "shadow", "outcome": "diverged"}, 2),
                        Sample({"against": "baseline", "outcome": "match"}, 42)],
        "requests_total": [Sample({"role": "shadow", "result": "ok"}, 41),
                           Sample({"role": "shadow", "result": "error"}, 1)],
        "sampled": [Sample({}, 50)],
        "dropped": [Sample({"reason": "overload"}, 8)],
    })
    evidence = read_evidence(stub, FleetQueries(parse_selector('{job="j"}')))  # type: ignore[arg-type]
    assert evidence.targets_up == ("a",) and evidence.targets_down == ("b",)
    assert evidence.inputs.new_vs_old == MatchCounts(42, 2)
    assert evidence.inputs.baseline_vs_old == MatchCounts(42, 0)
    assert evidence.inputs.requests == {"shadow": 42} and evidence.inputs.errors == {"shadow": 1}
    assert evidence.inputs.admission is not None
    assert (evidence.inputs.admission.eligible, evidence.inputs.admission.mirrored) == (50, 42)
    assert all('job="j"' in q for q in stub.asked)


def test_read_evidence_keeps_unstreamed_latency_apart():
    """Unstreamed-only traffic: the fleet's gate inputs have E2E and per-token samples of
    unstreamed answers and no streamed ones (never pooled)."""
    def buckets(role: str, bound: float, count: float) -> list[Sample]:
        return [Sample({"role": role, "le": str(bound)}, count),
                Sample({"role": role, "le": "+Inf"}, count)]

    stub = _Stub({
        "up{": [Sample({"instance": "a"}, 1)],
        "e2e_unstreamed_seconds": [*buckets("primary", 0.5, 40),
                                   *buckets("shadow", 0.5, 40)],
        "tpot_unstreamed_seconds": [*buckets("primary", 0.02, 40),
                                    *buckets("shadow", 0.02, 38)],
    })
    evidence = read_evidence(stub, FleetQueries(parse_selector('{job="j"}')))  # type: ignore[arg-type]
    for role, per_token in (("primary", 40), ("shadow", 38)):
        samples = evidence.inputs.latency[role]
        assert len(samples.e2e_unstreamed_s) == 40 and max(samples.e2e_unstreamed_s) <= 0.5
        assert len(samples.tpot_unstreamed_s) == per_token
        assert samples.ttft_s == samples.tpot_s == samples.e2e_s == ()
    assert any("e2e_unstreamed_seconds_bucket" in q for q in stub.asked)


def _buckets(values: list[float]) -> list[tuple[float, float]]:
    bounds = [*TIME_BUCKETS_S, float("inf")]
    return [(b, float(sum(v <= b for v in values))) for b in bounds]


def _latency_evidence(old: list[float], new: list[float]) -> FleetEvidence:
    """A scrape's evidence with TTFT histograms only, built as read_evidence builds it."""
    from dataclasses import replace

    from proxy.gate.stats import LatencySamples

    def inputs(place_old: str, place_new: str) -> GateInputs:
        return GateInputs(
            new_vs_old=MatchCounts(5000, 0), baseline_vs_old=MatchCounts(5000, 0),
            latency={"primary": LatencySamples(ttft_s=histogram_samples(_buckets(old),
                                                                        place=place_old)),
                     "shadow": LatencySamples(ttft_s=histogram_samples(_buckets(new),
                                                                       place=place_new))},
            requests={"primary": 5000, "shadow": 5000})
    spread = inputs("spread", "spread")
    return replace(_evidence(("a",), (), 5000, 0), inputs=spread,
                   edges=(inputs("low", "high"), inputs("high", "low")))


def test_histogram_edges_keep_the_guarantee_where_buckets_are_coarse() -> None:
    """Within one bucket (2^(1/6) wide) a 1.05x slowdown is not decidable from buckets: the
    spread pseudo-samples could pass or fail it, the edges say inconclusive; a 2x slowdown
    fails and an identical version passes (p99 limit 1.5 > one bucket)."""
    from proxy.gate.criteria import RATIO_LIMITS

    rng = random.Random(3)
    old = [0.2 * rng.lognormvariate(0, 0.15) for _ in range(5000)]
    same = [0.2 * rng.lognormvariate(0, 0.15) for _ in range(5000)]
    criteria = GateCriteria(min_samples=10, max_length_shift=None, max_error_rate_excess=1.0,
                            **{e.field: None for e in RATIO_LIMITS if e.metric != "ttft"},
                            max_ttft_p50_ratio=1.5, max_ttft_p99_ratio=1.5)
    assert fleet_verdict(_latency_evidence(old, same), criteria)["verdict"] == "pass"
    slower = fleet_verdict(_latency_evidence(old, [2 * v for v in same]), criteria)
    assert slower["verdict"] == "fail", slower["reasons"]
    tight = GateCriteria(min_samples=10, max_length_shift=None, max_error_rate_excess=1.0,
                         **{e.field: None for e in RATIO_LIMITS if e.metric != "ttft"},
                         max_ttft_p50_ratio=1.02, max_ttft_p99_ratio=None,
                         latency_floor_s=0.0)
    result = fleet_verdict(_latency_evidence(old, same), tight)
    assert result["verdict"] == "inconclusive", result["reasons"]
    json.dumps(result, allow_nan=False)
    assert histogram_samples([(1.0, 2), (float("inf"), 3)], place="high") == \
        (1.0, 1.0, float("inf"))
    assert histogram_samples([(1.0, 2), (float("inf"), 3)], place="low") == (0.0, 0.0, 1.0)
