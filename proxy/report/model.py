"""The report's content, built from exchange records (pure: records in, a `Report` out).

Old = the primary (serves clients), new = the shadow, baseline = a second copy
of the old version. Token counts follow the store's definitions: `compared`
counts deterministic requests with a token verdict (match or diverged)
against the primary; sampled requests are compared only as distributions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.capture.types import Capture
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.evidence.window import EvidenceWindow
from proxy.gate.stats import (
    METRICS,
    UNSTREAMED_METRICS,
    LatencySamples,
    LatencySummary,
    MannWhitney,
    mann_whitney,
    ratio,
    wilson_interval,
)
from proxy.gate.tally import AdmissionCounts, latency_by_role
from proxy.gate.verdict import GateCriteria, GateInputs, Verdict, evaluate
from proxy.report.divergences import DivergedList, list_diverged
from proxy.report.timeline import AdmissionStep, Timeline, timeline_of

METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E",
                 "e2e_unstreamed": "E2E (unstreamed)", "tpot_unstreamed": "TPOT (unstreamed)"}
ROLE_LABELS: dict[str, str] = {"primary": "old", "shadow": "new", "baseline": "baseline"}


@dataclass(frozen=True)
class PairSummary:
    """Token comparison of one side ("shadow" or "baseline") with the primary."""

    against: str
    compared: int
    diverged: int
    close: int  # diverged but within vLLM's top-k closeness rule
    not_comparable: int
    errors: int
    sampled: int
    first_divergence: tuple[int, ...]
    edit_distance: tuple[int, ...]
    length_delta: tuple[int, ...]
    finish_mismatch: int
    match_rate: float | None
    match_rate_ci: tuple[float, float]  # Wilson 95% bounds of the match rate
    # Diverged requests by the field that diverged first; by endpoint, those compared.
    diverged_fields: Mapping[str, int] = field(default_factory=dict)
    compared_endpoints: Mapping[str, int] = field(default_factory=dict)
    diverged_later_choice: int = 0  # first divergence in a choice after the first (n > 1)

    def as_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "diverged": self.diverged,
            "close": self.close,
            "not_comparable": self.not_comparable,
            "errors": self.errors,
            "sampled": self.sampled,
            "match_rate": self.match_rate,
            "match_rate_ci": list(self.match_rate_ci),
            "finish_reason_mismatches": self.finish_mismatch,
            "first_divergence": sorted(self.first_divergence),
            "mean_edit_distance": _mean(self.edit_distance),
            "diverged_fields": dict(self.diverged_fields),
            "diverged_later_choice": self.diverged_later_choice,
            "compared_endpoints": dict(self.compared_endpoints),
        }


@dataclass(frozen=True)
class LatencyRow:
    """One metric old vs new: summaries, p50/p99 ratios and the Mann-Whitney test."""

    metric: str
    old: LatencySummary
    new: LatencySummary
    p50_ratio: float | None
    p90_ratio: float | None
    p99_ratio: float | None
    test: MannWhitney | None


@dataclass(frozen=True)
class RoleSummary:
    """Requests, errors and finish reasons of one backend role."""

    role: str
    requests: int
    errors: Counter[str]
    cancelled: int
    finish_reasons: Counter[str]
    output_tokens: tuple[int, ...]


@dataclass(frozen=True)
class Report:
    """Everything the terminal, JSON and HTML renderings show."""

    samples: int  # mirrored exchanges on record
    deterministic: int
    shadow: PairSummary
    baseline: PairSummary | None
    latency: tuple[LatencyRow, ...]
    roles: dict[str, RoleSummary]
    samples_by_role: Mapping[str, LatencySamples]
    sampled: dict[str, RoleSummary]  # sampled (non-deterministic) requests only, by role
    sampled_length_test: MannWhitney | None  # output tokens of sampled requests, new vs old
    gate: Verdict
    # A cutover's evidence only, by version (roles "primary"/"shadow" then mean old/new,
    # whichever served clients); None: every record, old = primary.
    window: EvidenceWindow | None = None
    admission: AdmissionCounts | None = None  # sampled requests mirrored or shed (the store's)
    notes: tuple[str, ...] = ()  # what the reader must know first (records left out, pooled)
    timeline: Timeline = field(default_factory=Timeline)  # the gate re-judged over time
    diverged_requests: DivergedList = field(default_factory=DivergedList)


def versions_note(report: Report) -> str:
    """What "old" and "new" stand for in this report."""
    window = report.window
    if window is None:
        return "old = primary (serves clients), new = shadow, baseline = second old copy"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(window.since_unix))
    baseline = f", baseline = {window.baseline_url} (old copy)" if window.baseline_url else ""
    return (f"cutover evidence since {since}: old = {window.old_url}, new = "
            f"{window.new_url}, whichever served clients{baseline}")


def lead_line(report: Report) -> str:
    """The report in one line, first: the verdict, new's divergence against the old-vs-old
    noise, the latency change at the median, and the check that decides or holds it."""
    parts = [report.gate.verdict.upper()]
    shadow, baseline = report.shadow, report.baseline
    if shadow.compared:
        text = f"new diverges on {shadow.diverged / shadow.compared:.1%} of {shadow.compared}"
        if baseline is not None and baseline.compared:
            text += f" vs {baseline.diverged / baseline.compared:.1%} old-vs-old noise"
        parts.append(text)
    for row in report.latency:
        if row.metric in ("ttft", "e2e_unstreamed") and row.p50_ratio is not None:
            change = round((row.p50_ratio - 1) * 100)  # whole percent, never "-0%"
            parts.append(f"{METRIC_LABELS.get(row.metric, row.metric)} p50 "
                         + ("unchanged" if change == 0 else f"{change:+d}%"))
    status = report.gate.verdict
    deciding = next((r for r in report.gate.reasons if r.startswith(f"{status}:")), None)
    if status != "pass" and deciding is not None:
        what = deciding.split(":", 1)[1].strip().split(" (", 1)[0]
        parts.append(("failed on " if status == "fail" else "waiting on ") + what)
    return "; ".join(parts)


def _mean(values: Sequence[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _pair(against: str, pairs: Sequence[tuple[ExchangeRecord, Comparison]]) -> PairSummary:
    compared = diverged = close = not_comparable = errors = sampled = finish_mismatch = 0
    later = 0
    fields: Counter[str] = Counter()
    endpoints: Counter[str] = Counter()
    first: list[int] = []
    edits: list[int] = []
    deltas: list[int] = []
    for record, comp in pairs:
        if comp.outcome == "error":
            errors += 1
            continue
        if comp.length_delta is not None:
            deltas.append(comp.length_delta)
        if comp.finish_reason_match is False:
            finish_mismatch += 1
        if not record.meta.deterministic:
            sampled += 1  # the diff marks these not_comparable: distributions only
            continue
        if comp.outcome == "not_comparable":
            not_comparable += 1
            continue
        compared += 1
        endpoints[record.meta.endpoint] += 1
        if comp.edit_distance is not None:
            edits.append(comp.edit_distance)
        if comp.outcome == "diverged":
            diverged += 1
            fields[comp.field or "unknown"] += 1
            later += bool(comp.choice)
            close += bool(comp.close_match)
            if comp.first_divergence is not None:
                first.append(comp.first_divergence)
    return PairSummary(
        against=against,
        compared=compared,
        diverged=diverged,
        close=close,
        not_comparable=not_comparable,
        errors=errors,
        sampled=sampled,
        first_divergence=tuple(first),
        edit_distance=tuple(edits),
        length_delta=tuple(deltas),
        finish_mismatch=finish_mismatch,
        match_rate=(compared - diverged) / compared if compared else None,
        match_rate_ci=wilson_interval(compared - diverged, compared),
        diverged_fields=dict(fields.most_common()),
        compared_endpoints=dict(endpoints.most_common()),
        diverged_later_choice=later,
    )


def _role(role: str, captures: Sequence[Capture]) -> RoleSummary:
    errors: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    tokens: list[int] = []
    cancelled = 0
    for cap in captures:
        if cap.cancelled:
            cancelled += 1
        elif cap.error is not None:
            errors[cap.error] += 1
        elif cap.status is not None and cap.status >= 400:
            errors[f"http_{cap.status}"] += 1
        if cap.finish_reason is not None:
            finish[cap.finish_reason] += 1
        if cap.output_tokens is not None:
            tokens.append(cap.output_tokens)
    return RoleSummary(role, len(captures), errors, cancelled, finish, tuple(tokens))


def _lengths(roles: dict[str, RoleSummary], role: str) -> list[float]:
    summary = roles.get(role)
    return [float(n) for n in summary.output_tokens] if summary else []


def _latency_rows(old: LatencySamples, new: LatencySamples) -> tuple[LatencyRow, ...]:
    rows = []
    for metric in METRICS:
        if metric in UNSTREAMED_METRICS and not (old.metric(metric) or new.metric(metric)):
            continue  # no unstreamed answer on record: no row of zeros
        o, n = LatencySummary.of(old.metric(metric)), LatencySummary.of(new.metric(metric))
        rows.append(
            LatencyRow(
                metric=metric,
                old=o,
                new=n,
                p50_ratio=ratio(n.p50_s, o.p50_s),
                p90_ratio=ratio(n.p90_s, o.p90_s),
                p99_ratio=ratio(n.p99_s, o.p99_s),
                test=mann_whitney(old.metric(metric), new.metric(metric)),
            )
        )
    return tuple(rows)


def latency_samples(records: Iterable[ExchangeRecord]) -> dict[str, LatencySamples]:
    """Per-role latency samples: TTFT/ITL/TPOT/E2E of streamed answers, E2E and E2E per
    token of unstreamed ones (never pooled)."""
    return latency_by_role((record, cap) for record in records for cap in record.captures)


def build_report(
    records: Iterable[ExchangeRecord],
    criteria: GateCriteria | None = None,
    verdict: Verdict | None = None,
    latency: Mapping[str, LatencySamples] | None = None,
    window: EvidenceWindow | None = None,
    admission: AdmissionCounts | None = None,
    admission_steps: Sequence[AdmissionStep] | None = None,
) -> Report:
    """Fold records into a `Report`. The verdict is the gate's (`proxy.gate.verdict`):
    `verdict` when given, else evaluated on these records with `criteria`; `latency`
    (the samples the gate judged) when given, else taken from the records; `admission`:
    the proxy's eligible and shed counts, when it kept them, and `admission_steps` the
    same as flushed over time (for the verdict over time, judged with `criteria`)."""
    records = list(records)
    if verdict is None:
        verdict = evaluate(GateInputs.from_records(records), criteria)
    by_role: dict[str, list[Capture]] = {"primary": [], "shadow": [], "baseline": []}
    sampled: dict[str, list[Capture]] = {"primary": [], "shadow": [], "baseline": []}
    pairs: dict[str, list[tuple[ExchangeRecord, Comparison]]] = {"shadow": [], "baseline": []}
    samples = deterministic = 0
    for record in records:
        samples += 1
        deterministic += record.meta.deterministic
        for cap in record.captures:
            by_role.setdefault(cap.role, []).append(cap)
            if not record.meta.deterministic:
                sampled.setdefault(cap.role, []).append(cap)
        for comp in record.comparisons:
            pairs.setdefault(comp.against, []).append((record, comp))
    if latency is None:
        latency = latency_samples(records)
    latency = {
        role: latency.get(role, LatencySamples()) for role in ("primary", "shadow", "baseline")
    }
    sampled_roles = {role: _role(role, caps) for role, caps in sampled.items() if caps}
    return Report(
        samples=samples,
        deterministic=deterministic,
        shadow=_pair("shadow", pairs["shadow"]),
        baseline=_pair("baseline", pairs["baseline"]) if pairs["baseline"] else None,
        latency=_latency_rows(latency["primary"], latency["shadow"]),
        roles={role: _role(role, caps) for role, caps in by_role.items() if caps},
        samples_by_role=latency,
        sampled=sampled_roles,
        sampled_length_test=mann_whitney(
            _lengths(sampled_roles, "primary"), _lengths(sampled_roles, "shadow")
        ),
        gate=verdict,
        window=window,
        admission=admission,
        timeline=timeline_of(records, criteria, admission_steps),
        diverged_requests=list_diverged(records),
    )


def report_json(report: Report) -> dict[str, Any]:
    """The `--json` document (keys `compared`, `diverged`, `baseline`, `verdict` are a contract)."""
    baseline = report.baseline
    return {
        "compared": report.shadow.compared,
        "diverged": report.shadow.diverged,
        "baseline": baseline.as_json() if baseline else None,
        "verdict": report.gate.verdict,
        "reasons": list(report.gate.reasons),
        "notes": list(report.notes),
        "summary": lead_line(report),
        "samples": report.samples,
        "deterministic": report.deterministic,
        "shadow": report.shadow.as_json(),
        "diverged_fields": dict(report.shadow.diverged_fields),
        "latency": {
            row.metric: {
                "old": _summary_json(row.old),
                "new": _summary_json(row.new),
                "p50_ratio": row.p50_ratio,
                "p90_ratio": row.p90_ratio,
                "p99_ratio": row.p99_ratio,
                "mann_whitney": _test_json(row.test),
            }
            for row in report.latency
        },
        "roles": {
            ROLE_LABELS.get(r.role, r.role): {
                "requests": r.requests,
                "errors": dict(r.errors),
                "cancelled": r.cancelled,
                "finish_reasons": dict(r.finish_reasons),
            }
            for r in report.roles.values()
        },
        "sampled": {
            "roles": {
                ROLE_LABELS.get(r.role, r.role): {
                    "requests": r.requests,
                    "finish_reasons": dict(r.finish_reasons),
                    "mean_output_tokens": _mean(r.output_tokens),
                }
                for r in report.sampled.values()
            },
            "output_tokens_mann_whitney": _test_json(report.sampled_length_test),
        },
        "gate": report.gate.details,
        "window": report.window.to_json() if report.window is not None else None,
        "admission": report.admission.as_json() if report.admission is not None else None,
    }


def _summary_json(summary: LatencySummary) -> dict[str, Any]:
    return {
        "n": summary.n,
        "mean_s": summary.mean_s,
        "p50_s": summary.p50_s,
        "p90_s": summary.p90_s,
        "p99_s": summary.p99_s,
    }


def _test_json(test: MannWhitney | None) -> dict[str, Any] | None:
    if test is None:
        return None
    return {"p_value": test.p_value, "effect_size": test.effect_size, "u": test.u_new}
