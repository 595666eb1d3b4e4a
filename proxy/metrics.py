"""Every Prometheus object of the proxy, declared here with bounded labels and explicit buckets.

The registry is passed in (tests use their own); nothing registers globally.
Label values come from small fixed sets: role, endpoint, status class, outcome,
and a backend label that maps at most `max_backends` URLs to names (the rest
become "other"), so replacing routes at run time cannot grow the series count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.utils import floatToGoString

from proxy.capture.types import Capture
from proxy.compare.types import Comparison
from proxy.evidence.metrics import EvidenceMetrics
from proxy.histograms import BulkHistogram

__all__ = ["CONTENT_TYPE_LATEST", "BulkHistogram", "ProxyMetrics", "status_class"]

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                     1.5, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
ITL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
                 0.2, 0.5, 1.0, 2.5)
DIVERGENCE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
VERDICTS = ("pass", "fail", "inconclusive")
OTHER = "other"


def status_class(status: int | None) -> str:
    return "none" if status is None else f"{status // 100}xx"


class ProxyMetrics:
    """The proxy's metrics on `registry`; methods turn domain values into observations."""

    def __init__(self, registry: CollectorRegistry, max_backends: int = 8) -> None:
        self.registry = registry
        self._max_backends = max_backends
        self._backend_labels: dict[str, str] = {}
        ns = "vllm_cutover"
        self.requests = Counter(
            f"{ns}_requests", "Requests answered, per role and backend",
            ("role", "backend", "endpoint", "status_class"), registry=registry)
        self.ttft = Histogram(
            f"{ns}_ttft_seconds", "Time to first token (first chunk with choices)",
            ("role", "backend", "endpoint"), buckets=LATENCY_BUCKETS_S, registry=registry)
        self.itl = BulkHistogram(
            f"{ns}_itl_seconds", "Inter-token latency (gap between token chunks)",
            ("role", "backend"), ITL_BUCKETS_S, registry)
        self.e2e = Histogram(
            f"{ns}_e2e_seconds", "End-to-end request latency",
            ("role", "backend", "endpoint"), buckets=LATENCY_BUCKETS_S, registry=registry)
        self.backend_errors = Counter(
            f"{ns}_backend_errors", "Backend requests that failed (no usable answer)",
            ("role", "backend", "kind"), registry=registry)
        self.client_e2e = Histogram(
            f"{ns}_client_e2e_seconds", "Generation requests' time through the proxy as their "
            "clients saw it, request read to the primary's last byte relayed (every one, "
            "mirrored or not)", ("endpoint",), buckets=LATENCY_BUCKETS_S, registry=registry)
        self.proxy_errors = Counter(
            f"{ns}_proxy_errors", "Errors the proxy answered itself", ("status",),
            registry=registry)
        self.idle_closed = Counter(
            f"{ns}_idle_connections_closed", "Idle client connections closed because their "
            "client IP held more than --max-idle-per-client", registry=registry)
        self.cancelled = Counter(
            f"{ns}_client_cancelled", "Requests whose client went away mid-request",
            registry=registry)
        self.comparisons = Counter(
            f"{ns}_comparisons", "Comparisons with the primary per outcome",
            ("against", "outcome", "deterministic"), registry=registry)
        self.first_divergence = Histogram(
            f"{ns}_first_divergence_tokens", "Token index of the first divergence",
            ("against",), buckets=DIVERGENCE_BUCKETS, registry=registry)
        self.mirrored = Counter(
            f"{ns}_shadow_mirrored", "Requests mirrored", ("role",), registry=registry)
        self.sampled = Counter(
            f"{ns}_shadow_sampled", "Requests the sampler chose to mirror (mirrored or dropped)",
            registry=registry)
        self.shadow_dropped = Counter(
            f"{ns}_shadow_dropped", "Sampled requests not mirrored", ("reason",),
            registry=registry)
        self.diverged_field = Counter(
            f"{ns}_diverged_field", "Diverged comparisons by the field that diverged first "
            "(proxy.compare.fields.FIELDS)", ("against", "field"), registry=registry)
        self.shadow_inflight = Gauge(
            f"{ns}_shadow_inflight", "Mirrored requests in flight", registry=registry)
        self.token_id_source = Counter(
            f"{ns}_token_id_source", "Where compared token ids came from", ("source",),
            registry=registry)
        self.records_dropped = Counter(
            f"{ns}_records_dropped", "Records (or admission-count rows) not stored, by reason "
            "(queue_full, write_failed, admission_failed)", ("reason",), registry=registry)
        self.verdict = Gauge(
            f"{ns}_verdict", "Current gate verdict (1 on the current one)", ("verdict",),
            registry=registry)
        self.gate_check = Gauge(
            f"{ns}_gate_check", "Each gate check's state (1 on its current status: pass, "
            "fail, inconclusive)", ("check", "status"), registry=registry)
        self.cutover_deadline = Gauge(
            f"{ns}_cutover_deadline_timestamp_seconds", "When the cutover's current phase "
            "gives up (unix time; 0: no deadline); minus time() is the time left",
            registry=registry)
        self.gate_decision = Gauge(
            f"{ns}_gate_decision_seconds", "About how long the gate needs to decide at the "
            "traffic seen (the check it waits for; NaN: no estimate, or not shadowing)",
            registry=registry)
        self.gate_decision.set(math.nan)
        self.route_version = Gauge(
            f"{ns}_route_version", "Version of the routing table", registry=registry)
        self.cutover_phase = Gauge(
            f"{ns}_cutover_phase", "Phase of the proxy's cutover (1 on the current one; none "
            "ever started: no series)", ("phase",), registry=registry)
        self.evidence = EvidenceMetrics(registry)
        for against in ("shadow", "baseline"):  # at zero from the start (see EvidenceMetrics)
            for outcome in ("match", "diverged"):
                self.comparisons.labels(against, outcome, "true")
        for name in VERDICTS:
            self.verdict.labels(name).set(1.0 if name == "inconclusive" else 0.0)
        self._phases_seen: set[str] = set()

    def set_cutover_phase(self, phase: str) -> None:
        """1 on `phase`, 0 on the phases seen before (the label set stays the phases)."""
        for known in list(self._phases_seen):
            self.cutover_phase.labels(known).set(0.0)
        self._phases_seen.add(phase)
        self.cutover_phase.labels(phase).set(1.0)

    def backend_label(self, url: str) -> str:
        """host:port of the first `max_backends` URLs seen, "other" after that."""
        label = self._backend_labels.get(url)
        if label is None:
            if len(self._backend_labels) >= self._max_backends:
                return OTHER
            label = url.split("://", 1)[-1][:64]
            self._backend_labels[url] = label
        return label

    def observe_capture(self, capture: Capture, endpoint: str, count_request: bool = True) -> None:
        """Latency and errors of one capture (`capture.backend` is already a bounded label)."""
        backend = capture.backend
        if count_request:
            self.requests.labels(capture.role, backend, endpoint,
                                 status_class(capture.status)).inc()
        if capture.cancelled:
            return
        if capture.error is not None:
            self.backend_errors.labels(capture.role, backend, capture.error[:24]).inc()
            return
        if capture.ttft_s is not None:
            self.ttft.labels(capture.role, backend, endpoint).observe(capture.ttft_s)
        if capture.e2e_s is not None:
            self.e2e.labels(capture.role, backend, endpoint).observe(capture.e2e_s)
        if capture.itl_s:
            self.itl.observe_many((capture.role, backend), capture.itl_s)

    def observe_comparisons(self, comparisons: Iterable[Comparison], deterministic: bool) -> None:
        det = "true" if deterministic else "false"
        for comparison in comparisons:
            self.comparisons.labels(comparison.against, comparison.outcome, det).inc()
            if comparison.outcome == "diverged" and comparison.field is not None:
                self.diverged_field.labels(comparison.against, comparison.field).inc()
            if comparison.first_divergence is not None:
                self.first_divergence.labels(comparison.against).observe(
                    comparison.first_divergence)

    def drop_records(self, reason: str, n: int) -> None:
        """`RecordStore`'s on_drop: `n` records (or count rows) not stored for `reason`."""
        self.records_dropped.labels(reason).inc(n)

    def set_verdict(self, verdict: str, checks: Iterable[Mapping[str, Any]] = ()) -> None:
        """The verdict, and each check's status (`Verdict.details["checks"]` entries)."""
        for name in VERDICTS:
            self.verdict.labels(name).set(1.0 if name == verdict else 0.0)
        for check in checks:
            check_name, status = check.get("name"), check.get("status")
            if isinstance(check_name, str) and status in VERDICTS:
                for known in VERDICTS:
                    self.gate_check.labels(check_name[:48], known).set(
                        1.0 if known == status else 0.0)

    def set_cutover(self, phase: str, deadline_unix: float | None,
                    decision_in_s: float | None = None) -> None:
        """The cutover's phase, its deadline and the gate's estimate of when it decides,
        from each state it persists."""
        self.set_cutover_phase(phase)
        self.cutover_deadline.set(deadline_unix or 0.0)
        self.gate_decision.set(math.nan if decision_in_s is None else decision_in_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# Gauges the capture worker sets; every other gauge is the proxy's own.
WORKER_GAUGES = frozenset({"vllm_cutover_verdict", "vllm_cutover_gate_check"})


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def merge_expositions(own: bytes, worker: bytes) -> bytes:
    """One exposition from the proxy's and its capture worker's (the same families).

    Counters and histograms add up, sample by sample; a gauge is taken from the
    process that sets it (the verdict from the worker, the rest from the proxy).
    `_created` samples are left out: they would not add up.
    """
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, tuple[str, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = {}
    for source, text in (("own", own), ("worker", worker)):
        for family in text_string_to_metric_families(text.decode("utf-8")):
            if family.type == "gauge" and (family.name in WORKER_GAUGES) != (source == "worker"):
                continue
            entry = families.get(family.name)
            if entry is None:
                entry = families[family.name] = (family.type, family.documentation, {})
            samples = entry[2]
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sample.labels.items()))
                samples[key] = samples.get(key, 0.0) + sample.value
    lines: list[str] = []
    for name, (kind, documentation, samples) in families.items():
        doc = documentation.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for (sample_name, labels), value in samples.items():
            text_labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
            braces = f"{{{text_labels}}}" if labels else ""
            lines.append(f"{sample_name}{braces} {floatToGoString(value)}")
    return ("\n".join(lines) + "\n").encode("utf-8")
