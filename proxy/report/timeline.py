"""The verdict and its key ratios over time: the gate re-judged at a few looks (pure).

Each look judges the records that started up to that moment (oldest first, cumulative)
with the gate's own code (`GateInputs.from_records`, `evaluate`), so the last look is
the verdict the report leads with. Looks are evenly spaced by record count and capped
(`MAX_LOOKS`): each is a full evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from proxy.compare.types import ExchangeRecord
from proxy.gate.stats import LatencySamples, percentile, ratio
from proxy.gate.tally import AdmissionCounts, GateInputs
from proxy.gate.verdict import GateCriteria, VerdictName, evaluate

MAX_LOOKS = 16
# The p50 ratios drawn over time: streamed traffic's, else the unstreamed family's.
STREAMED_RATIOS = ("ttft", "tpot")
UNSTREAMED_RATIOS = ("e2e_unstreamed", "tpot_unstreamed")
# One flush of the proxy's admission counts: (t_unix, outcome, count).
AdmissionStep = tuple[float, str, int]


@dataclass(frozen=True)
class Look:
    """The evidence up to one moment: what the gate said and the rates it read."""

    elapsed_s: float  # from the first record's start to this look's last record's
    records: int
    verdict: VerdictName
    reasons: tuple[str, ...]  # every check's, most severe first
    match_rate: float | None  # new vs old, deterministic requests
    baseline_match_rate: float | None  # old vs old
    # New/old and baseline/old p50 ratios by metric (None: a side has no samples yet).
    p50_ratios: Mapping[str, float | None] = field(default_factory=dict)
    baseline_p50_ratios: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def deciding(self) -> tuple[str, ...]:
        """The reasons of the verdict's own status (each check that holds it there)."""
        return tuple(r for r in self.reasons if r.startswith(f"{self.verdict}:"))


@dataclass(frozen=True)
class Timeline:
    """The looks, oldest first, and the gate's p50 ratio limits by metric."""

    looks: tuple[Look, ...] = ()
    p50_limits: Mapping[str, float] = field(default_factory=dict)

    @property
    def ratio_metrics(self) -> tuple[str, ...]:
        """The metrics with a ratio at some look: streamed ones, else unstreamed ones."""
        def seen(metrics: Sequence[str]) -> tuple[str, ...]:
            return tuple(m for m in metrics
                         if any(look.p50_ratios.get(m) is not None for look in self.looks))
        return seen(STREAMED_RATIOS) or seen(UNSTREAMED_RATIOS)


def look_sizes(records: int, looks: int = MAX_LOOKS) -> list[int]:
    """How many records each look judges: evenly spaced, the last one all of them."""
    count = min(records, looks)
    return sorted({math.ceil(records * i / count) for i in range(1, count + 1)})


def _p50_ratio(inputs: GateInputs, role: str, metric: str) -> float | None:
    old = inputs.latency.get("primary", LatencySamples()).metric(metric)
    other = inputs.latency.get(role, LatencySamples()).metric(metric)
    return ratio(percentile(other, 50), percentile(old, 50))


def _admission(steps: Sequence[AdmissionStep], until_unix: float | None) -> AdmissionCounts:
    return AdmissionCounts.of((outcome, count) for t_unix, outcome, count in steps
                              if until_unix is None or t_unix <= until_unix)


def _look(prefix: Sequence[ExchangeRecord], elapsed_s: float, criteria: GateCriteria,
          admission: AdmissionCounts | None) -> Look:
    inputs = replace(GateInputs.from_records(prefix), admission=admission)
    verdict = evaluate(inputs, criteria)
    baseline = inputs.baseline_vs_old
    metrics = STREAMED_RATIOS + UNSTREAMED_RATIOS
    return Look(
        elapsed_s=elapsed_s,
        records=len(prefix),
        verdict=verdict.verdict,
        reasons=tuple(verdict.reasons),
        match_rate=inputs.new_vs_old.match_rate,
        baseline_match_rate=baseline.match_rate if baseline is not None else None,
        p50_ratios={m: _p50_ratio(inputs, "shadow", m) for m in metrics},
        baseline_p50_ratios={m: _p50_ratio(inputs, "baseline", m) for m in metrics},
    )


def timeline_of(records: Sequence[ExchangeRecord], criteria: GateCriteria | None = None,
             admission: Sequence[AdmissionStep] | None = None,
             looks: int = MAX_LOOKS) -> Timeline:
    """The gate re-judged on the records started up to each of `looks` moments; with the
    proxy's `admission` counts, those flushed by then (all of them at the last look)."""
    criteria = criteria or GateCriteria()
    ordered = sorted(records, key=lambda r: r.started_unix)
    found = []
    sizes = look_sizes(len(ordered), looks)
    for size in sizes:
        last = ordered[size - 1].started_unix
        counted = None
        if admission is not None:
            counted = _admission(admission, None if size == sizes[-1] else last)
        found.append(_look(ordered[:size], last - ordered[0].started_unix, criteria, counted))
    limits = {e.metric: limit for e, limit in criteria.enabled_limits() if e.quantile == 0.5}
    return Timeline(tuple(found), limits)
