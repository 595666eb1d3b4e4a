"""The evidence metrics count what the gate counts from records (unit, own registry)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from prometheus_client import CollectorRegistry

from proxy.evidence.metrics import LENGTH_BUCKETS, TIME_BUCKETS_S, EvidenceMetrics
from proxy.gate.tally import GateInputs
from tests.evidence_records import BASE, META, NEW, OLD, record


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_counts_match_the_records_aggregate():
    records = [record(1.0 + i, OLD, NEW, baseline=BASE, diverged=i % 3 == 0,
                      ttft={OLD: 0.1, NEW: 0.1 + i / 100, BASE: 0.1},
                      errors={NEW: "timeout"} if i == 4 else None) for i in range(9)]
    unstreamed = replace(records[0], meta=replace(META, stream=False))
    records.append(unstreamed)
    registry = CollectorRegistry()
    metrics = EvidenceMetrics(registry)
    for one in records:
        metrics.observe(one)
    inputs = GateInputs.from_records(records)
    for role in ("primary", "shadow", "baseline"):
        ok = _value(registry, "vllm_cutover_evidence_requests_total", role=role, result="ok")
        error = _value(registry, "vllm_cutover_evidence_requests_total", role=role,
                       result="error")
        assert ok + error == inputs.requests[role]
        assert error == inputs.errors[role]
        samples = inputs.latency[role]
        assert _value(registry, "vllm_cutover_evidence_ttft_seconds_count",
                      role=role) == len(samples.ttft_s)
        assert _value(registry, "vllm_cutover_evidence_tpot_seconds_count",
                      role=role) == len(samples.tpot_s)
        assert _value(registry, "vllm_cutover_evidence_output_tokens_count",
                      role=role) == len(samples.output_tokens)
        for name in ("e2e_unstreamed", "tpot_unstreamed"):
            assert _value(registry, f"vllm_cutover_evidence_{name}_seconds_count",
                          role=role) == len(samples.metric(name))
            assert _value(registry, f"vllm_cutover_evidence_{name}_seconds_sum",
                          role=role) == sum(samples.metric(name))
    # The unstreamed answer has lengths and its own E2E but no TTFT, as the records say.
    assert len(inputs.latency["shadow"].ttft_s) == 8
    assert len(inputs.latency["shadow"].e2e_unstreamed_s) == 1


def test_series_exist_from_the_start_and_buckets_are_fine():
    registry = CollectorRegistry()
    EvidenceMetrics(registry)
    assert registry.get_sample_value("vllm_cutover_evidence_requests_total",
                                     {"role": "baseline", "result": "error"}) == 0
    ratios = [b / a for a, b in pairwise(TIME_BUCKETS_S)]
    assert max(ratios) < 1.13 and TIME_BUCKETS_S[0] < 0.001 and TIME_BUCKETS_S[-1] >= 120
    assert LENGTH_BUCKETS[0] == 1 and LENGTH_BUCKETS == tuple(sorted(set(LENGTH_BUCKETS)))
