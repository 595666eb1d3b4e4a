"""The gate's evidence as Prometheus metrics: enough to rebuild the verdict from a fleet.

Every mirrored request recorded by a sidecar adds, per role (primary = old, shadow =
new, baseline = a second old), exactly what `GateInputs.from_records` counts from the
records: requests and errors, and for successful answers the TTFT and TPOT of streamed
ones, the E2E and E2E per completion token of unstreamed ones, and the output length.
Comparisons and admission are counted by `proxy.metrics`
(`vllm_cutover_comparisons_total`, `vllm_cutover_shadow_sampled_total`,
`vllm_cutover_shadow_dropped_total`). Labels: role and result only (no URL, no model: the
scrape adds the target's labels, bounded by the deployment).

Buckets are geometric, 2^(1/6) apart (12 % wide), so a p50 ratio limit of 1.10 is judged
from buckets narrower than the margin, not from a 0.1 s to 0.15 s step.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from proxy.compare.types import ExchangeRecord
from proxy.gate.stats import tpot_s, tpot_unstreamed_s
from proxy.gate.tally import latency_kind
from proxy.histograms import BulkHistogram

__all__ = ["EVIDENCE_ROLES", "LENGTH_BUCKETS", "TIME_BUCKETS_S", "EvidenceMetrics"]

EVIDENCE_ROLES = ("primary", "shadow", "baseline")
# 2^-11 s (0.49 ms) .. 2^7 s (128 s), six buckets per doubling.
TIME_BUCKETS_S = tuple(round(2 ** (k / 6), 9) for k in range(-66, 43))
# 1 .. 32768 tokens, four buckets per doubling (integers, deduplicated).
LENGTH_BUCKETS = tuple(sorted({round(2 ** (k / 4)) for k in range(61)}))
NS = "vllm_cutover_evidence"


class EvidenceMetrics:
    """Counters and histograms fed once per recorded exchange."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            f"{NS}_requests", "Recorded requests per role (cancelled ones left out), ok or "
            "error (no answer, or status >= 400)", ("role", "result"), registry=registry)
        # Bisect-fed: prometheus_client's Histogram walks its 109 bounds per value (about
        # 240 us per three-capture record measured, 8 us this way).
        self.ttft = BulkHistogram(
            f"{NS}_ttft_seconds", "TTFT of successful streamed answers, per role",
            ("role",), TIME_BUCKETS_S, registry)
        self.tpot = BulkHistogram(
            f"{NS}_tpot_seconds", "Time per output token after the first (streamed, >= 2 "
            "tokens), per role", ("role",), TIME_BUCKETS_S, registry)
        # Unstreamed answers: their E2E and E2E per completion token, never pooled with
        # the streamed TTFT/TPOT above.
        self.e2e_unstreamed = BulkHistogram(
            f"{NS}_e2e_unstreamed_seconds", "End-to-end time of successful unstreamed "
            "answers, per role", ("role",), TIME_BUCKETS_S, registry)
        self.tpot_unstreamed = BulkHistogram(
            f"{NS}_tpot_unstreamed_seconds", "End-to-end time over completion tokens of "
            "successful unstreamed answers (>= 1 token), per role", ("role",),
            TIME_BUCKETS_S, registry)
        self.output_tokens = BulkHistogram(
            f"{NS}_output_tokens", "Output length of successful answers, per role",
            ("role",), tuple(float(b) for b in LENGTH_BUCKETS), registry)
        # Every series exists from the start at zero: increase() over a window then counts
        # a sidecar's first requests too (a series born at 5 would be read as +0).
        for role in EVIDENCE_ROLES:
            for result in ("ok", "error"):
                self.requests.labels(role, result)
            for histogram in (self.ttft, self.tpot, self.e2e_unstreamed, self.tpot_unstreamed,
                              self.output_tokens):
                histogram.observe_many((role,), ())

    def observe(self, record: ExchangeRecord) -> None:
        """Count one record the way `GateInputs.from_records` aggregates it."""
        for cap in record.captures:
            if cap.cancelled:
                continue
            failed = cap.error is not None or cap.status is None or cap.status >= 400
            self.requests.labels(cap.role, "error" if failed else "ok").inc()
            if failed:
                continue
            labels = (cap.role,)
            kind = latency_kind(record, cap)
            if kind == "streamed":
                if cap.ttft_s is not None:
                    self.ttft.observe_many(labels, (cap.ttft_s,))
                per_token = tpot_s(cap)
                if per_token is not None:
                    self.tpot.observe_many(labels, (per_token,))
            elif kind == "unstreamed":
                if cap.e2e_s is not None:
                    self.e2e_unstreamed.observe_many(labels, (cap.e2e_s,))
                per_token = tpot_unstreamed_s(cap)
                if per_token is not None:
                    self.tpot_unstreamed.observe_many(labels, (per_token,))
            if cap.output_tokens is not None:
                self.output_tokens.observe_many(labels, (cap.output_tokens,))
