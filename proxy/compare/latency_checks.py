"""The gate's latency checks: new/old quantile ratios with bounds on both quantiles.

Each enabled ratio (TTFT, TPOT, unstreamed E2E and per-token, p50 and p99) bounds the
new and the old quantile with confidence sequences (`sequential.quantile_bounds`). It
passes when new's upper bound is within the allowance over old's lower bound, fails when
new's lower bound is beyond the allowance over old's upper bound, and is inconclusive
otherwise. The allowance is the larger of the ratio limit and the absolute floor (a few
milliseconds more is never a regression).

Like with like: old is the baseline (a second old copy, read by the same capture worker
the same way as the shadow) wherever it has samples of the metric, else the primary
(read by the relay). The gate judges what the traffic has: a family (streamed TTFT/TPOT,
unstreamed E2E/per-token) with no samples on either side is not applicable while the
other family has evidence; with none at all the latency is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from proxy.compare.checks import MOST_SCALE, Check, Status, more_samples, needs_text
from proxy.compare.criteria import GateCriteria, RatioLimit
from proxy.compare.sequential import quantile_ranks
from proxy.compare.stats import LatencySamples
from proxy.compare.tally import GateInputs

MOST_PROJECTED = 250_000


def reference_role(inputs: GateInputs, metric: str) -> str:
    """Old's samples of `metric`: the baseline's where it has any, else the primary's."""
    baseline = inputs.latency.get("baseline")
    return "baseline" if baseline is not None and baseline.metric(metric) else "primary"


def latency_checks(inputs: GateInputs, c: GateCriteria,
                   details: dict[str, Any]) -> list[Check]:
    limits = c.enabled_limits()
    if not limits:
        return []
    new = inputs.latency.get("shadow", LatencySamples())
    samples = {e.metric: (sorted(_role(inputs, reference_role(inputs, e.metric)).metric(e.metric)),
                          sorted(new.metric(e.metric))) for e, _ in limits}
    evidence = {e.family for e, _ in limits if any(samples[e.metric])}
    details["latency"] = {"old": _summaries(_role(inputs, "primary")),
                          "new": _summaries(new),
                          "reference": {e.metric: reference_role(inputs, e.metric)
                                        for e, _ in limits},
                          "families_judged": sorted(evidence), "ratios": {}}
    if not evidence:
        return [Check("latency", "inconclusive", "no latency samples yet (streamed or not)")]
    checks = []
    for entry, limit in limits:
        if entry.family not in evidence:
            continue  # this traffic has none of that kind: not applicable
        old, fresh = samples[entry.metric]
        check = _ratio_check(entry, limit, old, fresh, c)
        details["latency"]["ratios"][entry.field] = check.facts
        checks.append(check)
    return checks


def _summaries(samples: LatencySamples) -> dict[str, Any]:
    return {name: asdict(summary) for name, summary in samples.summaries().items()}


def _role(inputs: GateInputs, role: str) -> LatencySamples:
    return inputs.latency.get(role, LatencySamples())


def _at(ordered: Sequence[float], count: int, n: int) -> float | None:
    """The order statistic at `count` (1-based) of a sample of size n, read off `ordered`
    (n may exceed its length: a projection at the same empirical distribution)."""
    if count < 1 or count > n:
        return None
    index = min(len(ordered) - 1, max(0, math.ceil(count * len(ordered) / n) - 1))
    return ordered[index]


def _bounds(ordered: Sequence[float], q: float, alpha: float,
            n: int) -> tuple[float | None, float | None]:
    low_count, high_count = quantile_ranks(n, q, alpha)
    return _at(ordered, low_count, n), _at(ordered, high_count + 1, n)


def _ratio_check(entry: RatioLimit, limit: float, old: Sequence[float], new: Sequence[float],
                 c: GateCriteria) -> Check:
    label = entry.label
    if min(len(old), len(new)) < c.min_latency_samples:
        return Check(entry.field, "inconclusive",
                     f"{label}: {len(old)} old / {len(new)} new samples, "
                     f"need {c.min_latency_samples}", {"old_n": len(old), "new_n": len(new)})
    floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
    side = c.check_alpha() / 2

    def allowed(old_value: float) -> float:
        return max(limit * old_value, old_value + floor)

    def judge(scale: float) -> tuple[Status, tuple[float | None, float | None],
                                     tuple[float | None, float | None]]:
        o = _bounds(old, entry.quantile, side, math.ceil(len(old) * scale))
        n = _bounds(new, entry.quantile, side, math.ceil(len(new) * scale))
        if n[0] is not None and o[1] is not None and n[0] > allowed(o[1]):
            return "fail", o, n
        if n[1] is not None and o[0] is not None and n[1] <= allowed(o[0]):
            return "pass", o, n
        return "inconclusive", o, n

    status, (o_low, o_high), (n_low, n_high) = judge(1.0)
    point_old, point_new = _at(old, math.ceil(entry.quantile * len(old)), len(old)), \
        _at(new, math.ceil(entry.quantile * len(new)), len(new))
    point = _ratio(point_new, point_old)
    facts: dict[str, Any] = {"limit": limit, "floor_s": floor, "ratio": point,
                             "old": [o_low, o_high], "new": [n_low, n_high],
                             "old_n": len(old), "new_n": len(new)}
    upper = _ratio(n_high, o_low)
    text = (f"{label} new/old {_fmt(point)} (bounds {_fmt(_ratio(n_low, o_high))}.."
            f"{_fmt(upper)}, limit {limit:g} or +{floor * 1000:g} ms)")
    if status == "fail":
        return Check(entry.field, "fail", f"{text}: new slower, lower bound beyond", facts)
    if status == "pass":
        return Check(entry.field, "pass", text, facts)
    # projections up to ~250,000 samples a side (larger rank tables take seconds to build)
    more = more_samples(min(len(old), len(new)), lambda k: judge(k)[0] == "pass",
                        most=max(1.0, min(MOST_SCALE, MOST_PROJECTED / max(len(old), len(new)))))
    gap = None if upper is None else upper - max(limit, (o_low + floor) / o_low if o_low else
                                                 limit)
    facts.update(gap=gap, more_samples=more)
    how_far = ("upper bound not yet defined" if upper is None
               else f"upper bound {gap:.3f} over")
    return Check(entry.field, "inconclusive", f"{text}: {how_far}; {needs_text(more)}", facts)


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"
