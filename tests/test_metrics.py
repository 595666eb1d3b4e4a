"""Metrics: isolated registry, bounded labels, a scrape Prometheus can parse."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from proxy.capture.types import Capture
from proxy.compare.types import Comparison
from proxy.metrics import ProxyMetrics, merge_expositions, status_class


def _capture(**kw: Any) -> Capture:
    base = Capture(role="shadow", backend="h:2", status=200, ttft_s=0.1, itl_s=(0.01, 0.03),
                   e2e_s=0.4, output_tokens=3, finish_reason="stop", text="", token_ids=None)
    return replace(base, **kw)


def test_backend_labels_are_bounded():
    metrics = ProxyMetrics(CollectorRegistry(), max_backends=2)
    assert metrics.backend_label("http://a:1") == "a:1"
    assert metrics.backend_label("https://b:2") == "b:2"
    assert metrics.backend_label("http://c:3") == "other"
    assert metrics.backend_label("http://a:1") == "a:1"


def test_status_class():
    assert [status_class(s) for s in (None, 200, 404, 503)] == ["none", "2xx", "4xx", "5xx"]


def test_scrape_parses_with_observations():
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    metrics.observe_capture(_capture(), "chat")
    metrics.observe_capture(_capture(error="timeout", status=None), "chat")
    metrics.observe_comparisons([Comparison("shadow", "diverged", False, 7, 2, 0, True, None)],
                                deterministic=True)
    metrics.set_verdict("fail")
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    itl = families["vllm_cutover_itl_seconds"]
    count = next(s.value for s in itl.samples if s.name.endswith("_count"))
    assert count == 2
    errors = families["vllm_cutover_backend_errors"].samples
    assert any(s.labels == {"role": "shadow", "backend": "h:2", "kind": "timeout"}
               and s.value == 1 for s in errors)
    div = families["vllm_cutover_first_divergence_tokens"].samples
    assert any(s.name.endswith("_bucket") and s.labels["le"] == "8.0" and s.value == 1
               for s in div)
    verdicts = {s.labels["verdict"]: s.value for s in families["vllm_cutover_verdict"].samples}
    assert verdicts == {"pass": 0.0, "fail": 1.0, "inconclusive": 0.0}


def test_registries_are_isolated():
    a, b = ProxyMetrics(CollectorRegistry()), ProxyMetrics(CollectorRegistry())
    a.cancelled.inc()
    assert b.cancelled._value.get() == 0


def test_bulk_itl_histogram_matches_prometheus_semantics():
    from prometheus_client import Histogram

    from proxy.metrics import ITL_BUCKETS_S

    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    reference = Histogram("ref", "r", buckets=ITL_BUCKETS_S, registry=registry)
    gaps = (0.0005, 0.001, 0.0011, 0.02, 0.02, 3.0, 0.05)
    metrics.observe_capture(_capture(itl_s=gaps), "chat")
    for gap in gaps:
        reference.observe(gap)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    ours = {(s.name.rsplit("_", 1)[-1], s.labels.get("le")): s.value
            for s in families["vllm_cutover_itl_seconds"].samples}
    ref = {(s.name.rsplit("_", 1)[-1], s.labels.get("le")): s.value
           for s in families["ref"].samples if not s.name.endswith("_created")}
    assert ours == ref


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text.decode()) for s in f.samples}


def test_merged_exposition_adds_counters_and_histograms_and_takes_each_gauge_from_its_owner():
    own, worker = ProxyMetrics(CollectorRegistry()), ProxyMetrics(CollectorRegistry())
    own.observe_capture(_capture(role="primary", backend="h:1"), "chat")
    own.shadow_dropped.labels("cap").inc(2)
    own.shadow_inflight.set(3)
    own.set_verdict("fail")  # the proxy's own verdict gauge is stale: the worker owns it
    worker.observe_capture(_capture(role="primary", backend="h:1"), "chat")
    worker.observe_capture(_capture(ttft_s=7.0), "chat")
    worker.shadow_dropped.labels("cap").inc(1)
    worker.shadow_inflight.set(100)  # not the worker's gauge: ignored
    worker.set_verdict("pass")

    merged = _samples(merge_expositions(own.render(), worker.render()))

    assert merged[("vllm_cutover_shadow_dropped_total", (("reason", "cap"),))] == 3
    assert merged[("vllm_cutover_shadow_inflight", ())] == 3
    assert merged[("vllm_cutover_verdict", (("verdict", "pass"),))] == 1
    assert merged[("vllm_cutover_verdict", (("verdict", "fail"),))] == 0
    primary = (("backend", "h:1"), ("endpoint", "chat"), ("role", "primary"))
    assert merged[("vllm_cutover_ttft_seconds_count", primary)] == 2
    shadow = (("backend", "h:2"), ("endpoint", "chat"), ("role", "shadow"))
    assert merged[("vllm_cutover_ttft_seconds_sum", shadow)] == 7.0
    inf = tuple(sorted((*shadow, ("le", "+Inf"))))
    assert merged[("vllm_cutover_ttft_seconds_bucket", inf)] == 1
    assert not any(name.endswith("_created") for name, _ in merged)


def test_merged_exposition_keeps_label_values_that_need_escaping():
    own, worker = ProxyMetrics(CollectorRegistry()), ProxyMetrics(CollectorRegistry())
    worker.backend_errors.labels("shadow", "h:2", 'odd "kind"\\\n').inc()
    merged = _samples(merge_expositions(own.render(), worker.render()))
    key = ("vllm_cutover_backend_errors_total",
           (("backend", "h:2"), ("kind", 'odd "kind"\\\n'), ("role", "shadow")))
    assert merged[key] == 1


def test_each_gate_check_and_the_cutover_deadline_are_series():
    """Issue 34: the dashboard shows what the gate waits for, check by check, and the time
    the phase has left; the checks come from the worker's gate, the deadline from the
    proxy's cutover."""
    from proxy.gate.criteria import GateCriteria
    from proxy.gate.tally import GateInputs
    from proxy.gate.verdict import evaluate

    own, worker = ProxyMetrics(CollectorRegistry()), ProxyMetrics(CollectorRegistry())
    verdict = evaluate(GateInputs.from_records([]), GateCriteria())
    checks = verdict.details["checks"]
    worker.set_verdict(verdict.verdict, checks)
    own.set_verdict("pass", [{"name": "samples", "status": "pass"}])  # stale: not the owner
    assert math.isnan(_samples(own.render())[("vllm_cutover_gate_decision_seconds", ())])
    own.set_cutover("shadowing", 1_900_000_000.0, 360.0)
    merged = _samples(merge_expositions(own.render(), worker.render()))
    assert merged[("vllm_cutover_gate_decision_seconds", ())] == 360.0  # the gate's estimate
    for check in checks:
        key = ("vllm_cutover_gate_check", (("check", check["name"]), ("status", check["status"])))
        assert merged[key] == 1, key
    assert merged[("vllm_cutover_gate_check", (("check", "samples"), ("status", "pass")))] == 0
    assert merged[("vllm_cutover_cutover_deadline_timestamp_seconds", ())] == 1_900_000_000.0
    assert merged[("vllm_cutover_cutover_phase", (("phase", "shadowing"),))] == 1
