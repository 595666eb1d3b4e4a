"""The gate's latency checks: paired where both sides timed the same requests alike,
else new/old quantile ratios with bounds on both quantiles.

The allowance over an old time t is max(limit * t, t + floor): the ratio limit, or the
absolute floor (a few milliseconds more is never a regression), whichever is larger.
- Paired p50 (old = the baseline, timed by the same capture worker as the shadow on the
  same request): the share of requests where new exceeds the allowance over old's time
  on that request, bounded by a confidence sequence (`sequential.mean_bounds`). Below
  1/2: the median request is within the limit (pass); above: beyond it (fail). The
  prompt and answer lengths, most of the spread, cancel out of each pair, so the check
  decides in tens to hundreds of requests instead of thousands.
- Paired p99 (old = the baseline, every (old, new) pair since evidence began in joint 1 %
  buckets, `GateInputs.pair_tails`): the hypothesis to reject is "new's p99 q is at or
  beyond the allowance over old's p99". Under it every threshold t in [allowance(old's
  p99), q] has P(new >= t) >= 1 % >= P(allowance(old) > t). At each 1 % bucket [g_k,
  g_k+1) three families of bets bet against that (`sequential.tail_log_evidence`):
  request by request, old's allowance over g_k+1 more often than new over g_k; new over
  g_k less often than 1 %; old's allowance over g_k+1 more often than 1 %. Their weighted
  mean is an e-process wherever the hypothesis holds at that bucket. The check passes when the evidence reaches
  1/alpha at every bucket: thresholds far above new's p99 are explained by new's rate,
  far below by old's, those near it mostly by the pairs, whose shared noise (the same
  prompt and answer on both sides) cancels out. A version at or beyond its limit passes
  only if the bucket holding its p99 reached 1/alpha wrongly: probability <= alpha at
  every look, with no split of alpha. Old's times are read at the lower edge of their
  bucket, new's exceedances at the bucket's bottom (never in their favour): bucketing
  costs at most 2 % of the limit (old one bucket low, new's threshold one bucket below
  old's).
- Quantile ratios (p99 without pairs, and p50 where the source has no pairs, such as
  Prometheus):
  new's and old's quantile each bounded by confidence sequences
  (`sequential.quantile_bounds`); pass when new's upper bound is within the allowance over
  old's lower bound, fail when new's lower bound is beyond the allowance over old's upper
  bound.
Each pass side spends `GateCriteria.pass_alpha` (halved between two bounds), each fail
side `fail_alpha` (`proxy.gate.criteria` says why).

Like with like: old is the baseline (a second old copy, read by the same capture worker
the same way as the shadow) wherever it has samples of the metric, else the primary
(read by the relay). The gate judges what the traffic has: a family (streamed TTFT/TPOT,
unstreamed E2E/per-token) with no samples on either side is not applicable while the
other family has evidence; with none at all the latency is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from proxy.gate.checks import MOST_SCALE, Check, Need, Status, more_samples, needs_text
from proxy.gate.criteria import GateCriteria, RatioLimit
from proxy.gate.sequential import mean_bounds, quantile_ranks, tail_log_evidence
from proxy.gate.sketch import (
    PairHistogram,
    Ranked,
    SortedSample,
    last_edge_below,
    pair_edge,
    pair_edges,
)
from proxy.gate.stats import LatencySamples, LatencySummary
from proxy.gate.tally import GateInputs, Pairs

MOST_PROJECTED = 250_000


def reference_role(inputs: GateInputs, metric: str) -> str:
    """Old's samples of `metric`: the baseline's where it has any, else the primary's."""
    baseline = inputs.latency.get("baseline")
    return "baseline" if baseline is not None and baseline.metric(metric) else "primary"


def _ranked(inputs: GateInputs, role: str, metric: str) -> Ranked:
    """`role`'s samples of `metric` for a quantile: every one since evidence began where
    the source keeps them (`GateInputs.tails`), else the samples it has, sorted."""
    tail = inputs.tails.get(role, {}).get(metric)
    if tail is not None and len(tail) > 0:
        return tail
    return SortedSample.of(_role(inputs, role).metric(metric))


@dataclass(frozen=True)
class LatencyFacts:
    """What the latency checks saw: each side's summaries, which role stood for old per
    metric, the families of traffic judged, and each check by criteria field."""

    old: Mapping[str, LatencySummary]
    new: Mapping[str, LatencySummary]
    reference: Mapping[str, str]  # metric -> "baseline" or "primary"
    families_judged: tuple[str, ...]
    checks: tuple[Check, ...] = ()  # one per ratio limit judged (none: no samples)
    ratios: Mapping[str, Check] = field(default_factory=dict)  # criteria field -> its check

    def as_json(self) -> dict[str, object]:
        return {"old": _summaries(self.old), "new": _summaries(self.new),
                "reference": dict(self.reference),
                "families_judged": list(self.families_judged),
                "ratios": {name: check.facts_json() for name, check in self.ratios.items()}}


def latency_checks(inputs: GateInputs, c: GateCriteria) -> LatencyFacts | None:
    """The latency checks and what they saw; None when no latency limit is enabled."""
    limits = c.enabled_limits()
    if not limits:
        return None
    new = inputs.latency.get("shadow", LatencySamples())
    samples = {e.metric: (_ranked(inputs, reference_role(inputs, e.metric), e.metric),
                          _ranked(inputs, "shadow", e.metric)) for e, _ in limits}
    evidence = {e.family for e, _ in limits
                if len(samples[e.metric][0]) > 0 or len(samples[e.metric][1]) > 0}
    seen = LatencyFacts(old=_role(inputs, "primary").summaries(), new=new.summaries(),
                        reference={e.metric: reference_role(inputs, e.metric)
                                   for e, _ in limits},
                        families_judged=tuple(sorted(evidence)))
    if not evidence:
        return replace(seen, checks=(Check("latency", "inconclusive",
                                           "no latency samples yet (streamed or not)"),))
    checks: list[Check] = []
    ratios: dict[str, Check] = {}
    for entry, limit in limits:
        if entry.family not in evidence:
            continue  # this traffic has none of that kind: not applicable
        old, fresh = samples[entry.metric]
        # Paired wherever a baseline times this metric and the source records pairs: chosen
        # by which routes exist, not by the values seen, so one test judges each check at
        # every look.
        by_baseline = inputs.paired and reference_role(inputs, entry.metric) == "baseline"
        if entry.quantile == 0.5 and by_baseline:
            pairs = inputs.pairs.get(entry.metric, Pairs())
            check = _paired_check(entry, limit, pairs, c)
        elif by_baseline and inputs.pair_tails:  # a source that keeps every pair
            check = _paired_tail_check(entry, limit, inputs.pair_tails.get(
                entry.metric, PairHistogram()), old, fresh, c)
        else:
            check = _ratio_check(entry, limit, old, fresh, c)
        ratios[entry.field] = check
        checks.append(check)
    return replace(seen, checks=tuple(checks), ratios=ratios)


def _summaries(summaries: Mapping[str, LatencySummary]) -> dict[str, object]:
    return {name: asdict(summary) for name, summary in summaries.items()}


def _role(inputs: GateInputs, role: str) -> LatencySamples:
    return inputs.latency.get(role, LatencySamples())


def _rank(ordered: Ranked, count: int, n: int) -> int | None:
    """The rank in `ordered` of the order statistic at `count` (1-based) of a sample of
    size n (n may exceed its length: a projection at the same empirical distribution)."""
    if count < 1 or count > n:
        return None
    return min(len(ordered), max(1, math.ceil(count * len(ordered) / n)))


def _bounds(ordered: Ranked, q: float, alpha: float,
            n: int) -> tuple[float | None, float | None]:
    """The q-quantile's confidence bounds at sample size n: the lower one read at the low
    side of its rank, the upper one at the high side (`sketch.Ranked`)."""
    low_count, high_count = quantile_ranks(n, q, alpha)
    low, high = _rank(ordered, low_count, n), _rank(ordered, high_count + 1, n)
    return (None if low is None else ordered.low(low),
            None if high is None else ordered.high(high))


def _point(ordered: Ranked, q: float) -> float | None:
    rank = _rank(ordered, math.ceil(q * len(ordered)), len(ordered))
    return None if rank is None else (ordered.low(rank) + ordered.high(rank)) / 2


def _ratio_check(entry: RatioLimit, limit: float, old: Ranked, new: Ranked,
                 c: GateCriteria) -> Check:
    label = entry.label
    if min(len(old), len(new)) < c.min_latency_samples:
        return Check(entry.field, "inconclusive",
                     f"{label}: {len(old)} old / {len(new)} new samples, "
                     f"need {c.min_latency_samples}", {"old_n": len(old), "new_n": len(new)})
    floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
    pass_side, fail_side = c.pass_alpha() / 2, c.fail_alpha() / 2

    def allowed(old_value: float) -> float:
        return max(limit * old_value, old_value + floor)

    def judge(scale: float) -> tuple[Status, tuple[float | None, float | None],
                                     tuple[float | None, float | None]]:
        old_n, new_n = math.ceil(len(old) * scale), math.ceil(len(new) * scale)
        o = (_bounds(old, entry.quantile, pass_side, old_n)[0],
             _bounds(old, entry.quantile, fail_side, old_n)[1])
        n = (_bounds(new, entry.quantile, fail_side, new_n)[0],
             _bounds(new, entry.quantile, pass_side, new_n)[1])
        if n[0] is not None and o[1] is not None and n[0] > allowed(o[1]):
            return "fail", o, n
        if n[1] is not None and o[0] is not None and n[1] <= allowed(o[0]):
            return "pass", o, n
        return "inconclusive", o, n

    status, (o_low, o_high), (n_low, n_high) = judge(1.0)
    point = _ratio(_point(new, entry.quantile), _point(old, entry.quantile))
    facts: dict[str, object] = {"limit": limit, "floor_s": floor, "ratio": point,
                             "old": [o_low, o_high], "new": [n_low, n_high],
                             "old_n": len(old), "new_n": len(new), "basis": "unpaired"}
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
    how_far = ("upper bound not yet defined" if upper is None
               else f"upper bound {gap:.3f} over")
    return Check(entry.field, "inconclusive", f"{text}: {how_far}; {needs_text(more)}", facts,
                 Need(more, gap, of=min(len(old), len(new))))


def _paired_check(entry: RatioLimit, limit: float, pairs: Pairs, c: GateCriteria) -> Check:
    """The median request's new/old within the limit: the share of pairs where new is
    beyond the allowance over old's time, against 1/2."""
    label, n = entry.label, len(pairs)
    if n < c.min_latency_samples:
        return Check(entry.field, "inconclusive",
                     f"{label}: {n} paired requests, need {c.min_latency_samples}",
                     {"pairs": n, "basis": pairs.basis or "paired"})
    floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
    slower = sum(new > max(limit * old, old + floor) for old, new in zip(pairs.old, pairs.new))
    ratios = sorted(new / old for old, new in zip(pairs.old, pairs.new) if old > 0)
    median = ratios[(len(ratios) - 1) // 2] if ratios else None

    def judge(scale: float) -> tuple[Status, float, float]:
        m = max(1, round(n * scale))
        k = slower * m / n
        high = mean_bounds(k, m, c.pass_alpha())[1]
        low = mean_bounds(k, m, c.fail_alpha())[0]
        if low > 0.5:
            return "fail", low, high
        return ("pass" if high < 0.5 else "inconclusive"), low, high

    status, low, high = judge(1.0)
    facts: dict[str, object] = {"limit": limit, "floor_s": floor, "ratio": median,
                             "pairs": n, "slower": slower, "share_slower": slower / n,
                             "share_bounds": [low, high], "basis": pairs.basis,
                             "old_n": n, "new_n": n}
    text = (f"{label} paired: new beyond {limit:g}x old (or +{floor * 1000:g} ms) on "
            f"{slower}/{n} requests ({slower / n:.1%}, bounds {low:.1%}..{high:.1%}; median "
            f"new/old {_fmt(median)}; {pairs.basis})")
    if status == "fail":
        return Check(entry.field, "fail", f"{text}: most requests slower, beyond the limit",
                     facts)
    if status == "pass":
        return Check(entry.field, "pass", f"{text}: the median request is within", facts)
    more = more_samples(n, lambda k: judge(k)[0] == "pass")
    return Check(entry.field, "inconclusive",
                 f"{text}: upper bound {high - 0.5:.3f} over 1/2; {needs_text(more)}", facts,
                 Need(more, high - 0.5))  # n: the newest LATENCY_WINDOW, capped


def allowance(limit: float, floor: float, old: NDArray[np.float64]) -> NDArray[np.float64]:
    """What new may take where old took `old`: max(limit x old, old + floor)."""
    out: NDArray[np.float64] = np.maximum(limit * old, old + floor)
    return out


@dataclass(frozen=True)
class TailCounts:
    """Per 1 % bucket k from `start` (one bucket past the pairs' span on each side: every
    bucket beyond counts as that one): of `n` pairs, those where new reaches the bucket's
    bottom (`new_over`), where old's allowance clears its top (`old_over`), the first but
    not the second (`loss`) and the second but not the first (`gain`)."""

    n: int
    start: int
    new_over: NDArray[np.float64]
    old_over: NDArray[np.float64]
    gain: NDArray[np.float64]
    loss: NDArray[np.float64]

    @classmethod
    def of(cls, pairs: PairHistogram, limit: float, floor: float) -> TailCounts:
        if not pairs.counts:
            empty = np.zeros(1)
            return cls(0, 0, empty, empty, empty, empty)
        cells = np.array(list(pairs.counts), dtype=np.int64)
        weight = np.array(list(pairs.counts.values()), dtype=float)
        old_b, new_b = cells[:, 0], cells[:, 1]
        # old read at its bucket's lower edge: never counted above what it was; old's
        # allowance clears the top of bucket k exactly when k <= top - 1
        top = last_edge_below(allowance(limit, floor, pair_edges(old_b)))
        start = int(min(new_b.min(), top.min() - 1)) - 1
        size = int(max(new_b.max(), top.max())) + 2 - start
        new_at = np.bincount(new_b - start, weight, size).astype(float)
        top_at = np.bincount(top - start, weight, size).astype(float)
        new_over = np.cumsum(new_at[::-1])[::-1]  # new_b >= k
        old_over = np.r_[np.cumsum(top_at[::-1])[::-1][1:], 0.0]  # top >= k + 1
        gain, loss = np.zeros(size + 1), np.zeros(size + 1)
        # gain on k in [new_b + 1, top - 1], loss on k in [top, new_b]: difference arrays
        has_gain, has_loss = new_b + 1 <= top - 1, top <= new_b
        np.add.at(gain, new_b[has_gain] + 1 - start, weight[has_gain])
        np.add.at(gain, top[has_gain] - start, -weight[has_gain])
        np.add.at(loss, top[has_loss] - start, weight[has_loss])
        np.add.at(loss, new_b[has_loss] + 1 - start, -weight[has_loss])
        # n from the cells themselves: the rates' bets need n >= every count
        return cls(int(weight.sum()), start, new_over, old_over, np.cumsum(gain)[:size],
                   np.cumsum(loss)[:size])

    def log_evidence(self, tail: float, scale: float = 1.0) -> NDArray[np.float64]:
        """`sequential.tail_log_evidence` at every bucket, counts scaled by `scale`."""
        return tail_log_evidence(self.n * scale, self.new_over * scale,
                                 self.old_over * scale, self.gain * scale,
                                 self.loss * scale, tail)


def _paired_tail_check(entry: RatioLimit, limit: float, pairs: PairHistogram, old: Ranked,
                       new: Ranked, c: GateCriteria) -> Check:
    """The p99 within the limit, on pairs: see the module's docstring."""
    label, n = entry.label, len(pairs)
    basis = "paired"
    if min(n, len(old), len(new)) < c.min_latency_samples:
        return Check(entry.field, "inconclusive",
                     f"{label}: {n} paired requests, need {c.min_latency_samples}",
                     {"pairs": n, "old_n": len(old), "new_n": len(new), "basis": basis})
    floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
    level = math.log(1 / c.pass_alpha())
    tail = 1 - entry.quantile
    counts = TailCounts.of(pairs, limit, floor)
    fail_side = c.fail_alpha() / 2

    def judge(scale: float) -> tuple[Status, int, float]:
        old_n, new_n = math.ceil(len(old) * scale), math.ceil(len(new) * scale)
        n_low = _bounds(new, entry.quantile, fail_side, new_n)[0]
        o_high = _bounds(old, entry.quantile, fail_side, old_n)[1]
        if n_low is not None and o_high is not None \
                and n_low > max(limit * o_high, o_high + floor):
            return "fail", 0, math.nan
        evidence = counts.log_evidence(tail, scale)
        weakest = int(np.argmin(evidence))
        status: Status = "pass" if evidence[weakest] >= level else "inconclusive"
        return status, weakest, float(evidence[weakest])

    status, weakest, evidence = judge(1.0)
    point = _ratio(_point(new, entry.quantile), _point(old, entry.quantile))
    threshold = pair_edge(counts.start + weakest)
    facts: dict[str, object] = {"limit": limit, "floor_s": floor, "ratio": point,
                                "pairs": n, "old_n": len(old), "new_n": len(new),
                                "basis": basis, "needed": level}
    head = (f"{label} new/old {_fmt(point)} (paired, {n} requests; limit {limit:g} or "
            f"+{floor * 1000:g} ms)")
    if status == "fail":
        return Check(entry.field, "fail", f"{head}: new slower, its p99's lower bound beyond",
                     facts)
    facts["weakest"] = {"threshold_s": threshold,
                        "new_over": float(counts.new_over[weakest]),
                        "old_over": float(counts.old_over[weakest]),
                        "log_evidence": evidence}
    where = (f"weakest threshold {threshold:.4g} s: new at or over it on "
             f"{counts.new_over[weakest]:.0f}, old's allowance over the next 1 % edge on "
             f"{counts.old_over[weakest]:.0f}; evidence {evidence:.1f} of {level:.1f}")
    if status == "pass":
        return Check(entry.field, "pass", f"{head}: every threshold explained, {where}", facts)
    more = more_samples(n, lambda k: judge(k)[0] == "pass",
                        most=max(1.0, min(MOST_SCALE, MOST_PROJECTED / max(len(old), len(new)))))
    of = n
    if more is None:
        # With few events beyond new's p99 yet the pairs there project nothing; the two
        # bounds' projection (a weaker test of the same limit, so an upper estimate) is
        # then the estimate, counted in its own samples.
        unpaired = _ratio_check(entry, limit, old, new, c).need
        if unpaired is not None and unpaired.more_samples is not None:
            more, of = unpaired.more_samples, unpaired.of if unpaired.of is not None else n
    return Check(entry.field, "inconclusive", f"{head}: {where}; {needs_text(more)}", facts,
                 Need(more, level - evidence, of=of))


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"
