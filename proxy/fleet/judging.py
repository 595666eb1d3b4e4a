"""The fleet verdict: summed sidecar metrics -> `GateInputs` -> `proxy.gate.verdict.evaluate`.

One verdict logic: the fleet's counts and histograms become the same `GateInputs` a
sidecar builds from its records, and the same pure gate judges them. What is weaker:
latency and output lengths exist only as histogram buckets (2^(1/6) apart, see
`proxy.evidence.metrics`). Each bucket's count is spread evenly across the bucket, so a
quantile's confidence-sequence bound is read off pseudo-samples, so a bound is only known
to within its bucket (2^(1/6), about 12 %, where the per-record one is exact). To keep the
guarantee, latency is judged twice at the bucket edges: a pass needs the pessimistic
placement (new's counts at their buckets' upper edges, old's at the lower ones) to pass,
a fail needs the optimistic one (the other way round) to fail; what lies between is
inconclusive. A ratio limit closer to 1 than a bucket (1.10 is under 1.12) thus cannot
pass on buckets alone unless the floor allows it: set it to 1.15 or more for the fleet.

A scrape that misses sidecars is never a pass: no target, a target down, or fewer up
than `min_targets` make a pass inconclusive (a fail stays a fail: the sidecars that
answered show it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from proxy.fleet.prometheus import PrometheusClient, Sample
from proxy.fleet.promql import (
    E2E_UNSTREAMED,
    LENGTHS,
    TPOT,
    TPOT_UNSTREAMED,
    TTFT,
    FleetQueries,
)
from proxy.gate.stats import LatencySamples
from proxy.gate.verdict import (
    AdmissionCounts,
    GateCriteria,
    GateInputs,
    MatchCounts,
    Verdict,
    evaluate,
)

__all__ = ["FleetEvidence", "fleet_verdict", "histogram_samples", "read_evidence"]

MAX_SAMPLES_PER_ROLE = 50_000
Placement = Literal["spread", "low", "high"]
_SEVERITY = {"fail": 0, "inconclusive": 1, "pass": 2}


@dataclass(frozen=True)
class FleetEvidence:
    """What Prometheus holds of every matching sidecar."""

    targets_up: tuple[str, ...]
    targets_down: tuple[str, ...]
    inputs: GateInputs
    queries: dict[str, str] = field(default_factory=dict)
    # The same counts with latency at its buckets' edges: (pessimistic, optimistic).
    edges: tuple[GateInputs, GateInputs] | None = None


def _count(value: float) -> int:
    """A counter sum or an increase() estimate as a whole count."""
    return max(0, round(value)) if math.isfinite(value) else 0


def histogram_samples(buckets: Iterable[tuple[float, float]], integer: bool = False,
                      cap: int = MAX_SAMPLES_PER_ROLE,
                      place: Placement = "spread") -> tuple[float, ...]:
    """Pseudo-samples from cumulative (upper bound, count) buckets: each bucket's count
    spread evenly over (previous bound, bound]; the +Inf bucket's at the last finite bound.
    `place` "low" / "high" puts every count at its bucket's lower / upper edge (+Inf's:
    infinite). Above `cap` samples the counts are scaled down (less power)."""
    ordered = sorted(buckets)
    counts: list[tuple[float, float, int]] = []
    lower, running = 0.0, 0
    for bound, cumulative in ordered:
        total = max(_count(cumulative), running)  # increase() estimates can dip
        upper = bound if math.isfinite(bound) else lower
        high_edge = bound if place == "high" else upper  # +Inf stays infinite at "high"
        counts.append((lower, high_edge, total - running))
        running, lower = total, upper
    scale = min(1.0, cap / running) if running else 1.0
    out: list[float] = []
    for low, high, n in counts:
        n = round(n * scale)
        if place != "spread":
            out.extend([low if place == "low" else high] * n)
            continue
        for k in range(n):
            value = low + (high - low) * (k + 0.5) / n
            out.append(float(min(max(math.ceil(value), low + 1), high)) if integer
                       and high > low else value)
    return tuple(out)


def _by_role(samples: list[Sample]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        out.setdefault(s.labels.get("role", ""), []).append((float(s.labels["le"]), s.value))
    return out


def read_evidence(client: PrometheusClient, queries: FleetQueries) -> FleetEvidence:
    """Query Prometheus (PrometheusUnavailable on any failure) into `GateInputs`."""
    texts = {"targets": queries.targets(), "comparisons": queries.comparisons(),
             "requests": queries.requests(), "ttft": queries.histogram(TTFT),
             "tpot": queries.histogram(TPOT), "lengths": queries.histogram(LENGTHS),
             "e2e_unstreamed": queries.histogram(E2E_UNSTREAMED),
             "tpot_unstreamed": queries.histogram(TPOT_UNSTREAMED),
             "sampled": queries.sampled(), "shed": queries.shed()}
    rows = {name: client.query(text) for name, text in texts.items()}
    up = tuple(sorted(s.labels.get("instance", "?") for s in rows["targets"] if s.value == 1))
    down = tuple(sorted(s.labels.get("instance", "?") for s in rows["targets"] if s.value != 1))
    pairs: dict[str, dict[str, int]] = {}
    for s in rows["comparisons"]:
        side = pairs.setdefault(s.labels["against"], {"match": 0, "diverged": 0})
        side[s.labels["outcome"]] += _count(s.value)
    requests: dict[str, int] = {}
    errors: dict[str, int] = {}
    for s in rows["requests"]:
        role = s.labels["role"]
        requests[role] = requests.get(role, 0) + _count(s.value)
        if s.labels["result"] == "error":
            errors[role] = errors.get(role, 0) + _count(s.value)
    ttft, tpot, lengths, whole, whole_per_token = (
        _by_role(rows[k]) for k in ("ttft", "tpot", "lengths", "e2e_unstreamed",
                                    "tpot_unstreamed"))

    def latency_at(place: dict[str, Placement]) -> dict[str, LatencySamples]:
        def at(rows_of: dict[str, list[tuple[float, float]]], role: str) -> tuple[float, ...]:
            return histogram_samples(rows_of.get(role, ()), place=place.get(role, "spread"))

        return {role: LatencySamples(
            ttft_s=at(ttft, role), tpot_s=at(tpot, role),
            output_tokens=tuple(int(v) for v in histogram_samples(lengths.get(role, ()),
                                                                  integer=True)),
            e2e_unstreamed_s=at(whole, role), tpot_unstreamed_s=at(whole_per_token, role))
            for role in {*ttft, *tpot, *lengths, *whole, *whole_per_token}}

    latency = latency_at({})
    has_baseline = "baseline" in pairs or requests.get("baseline", 0) > 0
    base = pairs.get("baseline", {"match": 0, "diverged": 0})
    new = pairs.get("shadow", {"match": 0, "diverged": 0})
    sampled = sum(_count(s.value) for s in rows["sampled"])
    shed = [(s.labels.get("reason", "?"), _count(s.value)) for s in rows["shed"]]
    inputs = GateInputs(
        new_vs_old=MatchCounts(new["match"] + new["diverged"], new["diverged"]),
        baseline_vs_old=MatchCounts(base["match"] + base["diverged"], base["diverged"])
        if has_baseline else None,
        latency=latency, requests=requests, errors=errors,
        admission=AdmissionCounts.of([("eligible", sampled), *shed]) if sampled else None,
        paired=False)  # histograms: no request is known on both sides
    old_low = {"primary": "low", "baseline": "low", "shadow": "high"}
    old_high = {"primary": "high", "baseline": "high", "shadow": "low"}
    edges = (replace(inputs, latency=latency_at(old_low)),  # type: ignore[arg-type]
             replace(inputs, latency=latency_at(old_high)))  # type: ignore[arg-type]
    return FleetEvidence(up, down, inputs, texts, edges)


def _at_edges(spread: Verdict, pessimistic: Verdict, optimistic: Verdict) -> Verdict:
    """Pass only where the pessimistic bucket edges pass, fail only where the optimistic
    ones fail; otherwise inconclusive, with the spread evaluation's reasons."""
    # the edges' details may hold infinite values (+Inf buckets): keep the spread ones
    if pessimistic.verdict == "pass":
        return replace(spread, verdict="pass", reasons=pessimistic.reasons)
    if optimistic.verdict == "fail":
        return replace(spread, verdict="fail", reasons=optimistic.reasons)
    reasons = list(spread.reasons)
    if spread.verdict != "inconclusive":
        reasons.insert(0, f"inconclusive: histogram buckets too coarse to decide: "
                          f"{spread.verdict} with counts spread within buckets, not at "
                          "their edges")
    return replace(spread, verdict="inconclusive", reasons=reasons)


def fleet_verdict(evidence: FleetEvidence, criteria: GateCriteria,
                  min_targets: int = 1) -> dict[str, Any]:
    """The gate's verdict dict over the fleet's evidence, with the scrape's own checks."""
    verdict: Verdict = evaluate(evidence.inputs, criteria)
    if evidence.edges is not None:
        verdict = _at_edges(verdict, *(evaluate(e, criteria) for e in evidence.edges))
    up, down = evidence.targets_up, evidence.targets_down
    problems = []
    if not up and not down:
        problems.append("no sidecar matches the selector in Prometheus")
    if down:
        problems.append(f"{len(down)} of {len(up) + len(down)} sidecars not scraped "
                        f"(up == 0): {', '.join(down[:5])}: their evidence is missing")
    if len(up) < min_targets:
        problems.append(f"{len(up)} sidecars scraped, need {min_targets}")
    reasons = [f"inconclusive: {p}" for p in problems] + list(verdict.reasons)
    if problems:
        reasons.append(f"pass: {len(up)} sidecars scraped")
    reasons.sort(key=lambda r: _SEVERITY[r.split(":", 1)[0]])
    name = verdict.verdict
    if problems and name == "pass":
        name = "inconclusive"
    result = {**verdict.to_dict(), "verdict": name, "reasons": reasons}
    result["details"]["fleet"] = {"targets_up": list(up), "targets_down": list(down),
                                  "min_targets": min_targets, "queries": evidence.queries}
    result["compared"] = evidence.inputs.new_vs_old.compared
    result["diverged"] = evidence.inputs.new_vs_old.diverged
    return result
