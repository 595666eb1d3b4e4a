"""Statistics for the verdict: percentiles, Mann-Whitney U with effect size, Wilson bounds.

Pure functions over plain numbers. scipy is imported lazily (only the
Mann-Whitney test needs it) so importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from proxy.capture.types import Capture

Alternative = Literal["two-sided", "greater", "less"]
# Streamed requests give TTFT, ITL, TPOT and E2E; unstreamed ones only their end-to-end time
# and that time per output token (as `vllm bench serve` reports them), kept apart, never pooled.
METRICS = ("ttft", "itl", "tpot", "e2e", "e2e_unstreamed", "tpot_unstreamed")
UNSTREAMED_METRICS = ("e2e_unstreamed", "tpot_unstreamed")


def percentile(values: Sequence[float], q: float) -> float | None:
    """q-th percentile (0-100) with linear interpolation (numpy's default); None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class LatencySummary:
    """Count, mean and p50/p90/p99 of one latency sample, in seconds."""

    n: int
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> LatencySummary:
        if not values:
            return cls(0, None, None, None, None)
        ordered = sorted(values)
        return cls(
            n=len(ordered),
            mean_s=math.fsum(ordered) / len(ordered),
            p50_s=percentile(ordered, 50),
            p90_s=percentile(ordered, 90),
            p99_s=percentile(ordered, 99),
        )


def tpot_s(capture: Capture) -> float | None:
    """Time per output token after the first, as `vllm bench serve` computes it."""
    tokens = capture.output_tokens
    if capture.e2e_s is None or capture.ttft_s is None or tokens is None or tokens < 2:
        return None
    return (capture.e2e_s - capture.ttft_s) / (tokens - 1)


def tpot_unstreamed_s(capture: Capture) -> float | None:
    """An unstreamed answer's E2E over its completion tokens (`usage.completion_tokens`, as
    `vllm bench serve` divides for unstreamed runs); None without a token."""
    tokens = capture.output_tokens
    if capture.e2e_s is None or tokens is None or tokens < 1:
        return None
    return capture.e2e_s / tokens


@dataclass(frozen=True)
class LatencySamples:
    """Samples of one role: per-request TTFT, TPOT, E2E of streamed answers, all their
    inter-token gaps, E2E and E2E per token of unstreamed ones, and output lengths of both
    (the distribution sampled requests are compared by)."""

    ttft_s: tuple[float, ...] = ()
    itl_s: tuple[float, ...] = ()
    tpot_s: tuple[float, ...] = ()
    e2e_s: tuple[float, ...] = ()
    output_tokens: tuple[int, ...] = ()
    e2e_unstreamed_s: tuple[float, ...] = ()
    tpot_unstreamed_s: tuple[float, ...] = ()  # E2E over completion tokens, unstreamed only

    @classmethod
    def from_captures(cls, captures: Iterable[Capture], unstreamed: Iterable[Capture] = (),
                      lengths_only: Iterable[Capture] = ()) -> LatencySamples:
        """`captures` were streamed (TTFT, ITL, TPOT, E2E), `unstreamed` were not (their E2E
        and E2E per completion token); successful, complete ones only (errors and
        cancellations would skew latency). Output lengths come from all three; the
        `lengths_only` ones have a latency of neither kind (`tally.latency_kind`)."""
        ttft: list[float] = []
        itl: list[float] = []
        tpot: list[float] = []
        e2e: list[float] = []
        lengths: list[int] = []
        for cap in captures:
            if not _complete(cap):
                continue
            if cap.ttft_s is not None:
                ttft.append(cap.ttft_s)
            if cap.e2e_s is not None:
                e2e.append(cap.e2e_s)
            itl.extend(cap.itl_s)
            if cap.output_tokens is not None:
                lengths.append(cap.output_tokens)
            per_token = tpot_s(cap)
            if per_token is not None:
                tpot.append(per_token)
        whole: list[float] = []
        whole_per_token: list[float] = []
        for cap in unstreamed:
            if not _complete(cap):
                continue
            if cap.e2e_s is not None:
                whole.append(cap.e2e_s)
            if cap.output_tokens is not None:
                lengths.append(cap.output_tokens)
            per_token = tpot_unstreamed_s(cap)
            if per_token is not None:
                whole_per_token.append(per_token)
        lengths.extend(cap.output_tokens for cap in lengths_only
                       if _complete(cap) and cap.output_tokens is not None)
        return cls(tuple(ttft), tuple(itl), tuple(tpot), tuple(e2e), tuple(lengths),
                   tuple(whole), tuple(whole_per_token))

    def metric(self, name: str) -> tuple[float, ...]:
        """Sample by metric name: one of METRICS."""
        if name not in METRICS:
            raise ValueError(f"unknown latency metric {name!r}; expected one of {METRICS}")
        values: tuple[float, ...] = getattr(self, f"{name}_s")
        return values

    def summaries(self) -> dict[str, LatencySummary]:
        return {name: LatencySummary.of(self.metric(name)) for name in METRICS}


@dataclass(frozen=True)
class MannWhitney:
    """Mann-Whitney U of `new` vs `old`; effect = P(new > old) - P(new < old) in [-1, 1]."""

    u_new: float
    p_value: float
    effect_size: float  # rank-biserial correlation (= Cliff's delta); > 0: new is slower
    n_old: int
    n_new: int
    alternative: Alternative


def mann_whitney(
    old: Sequence[float],
    new: Sequence[float],
    alternative: Alternative = "two-sided",
    max_samples: int = 20_000,
) -> MannWhitney | None:
    """Test whether `new` latencies differ from (or, "greater", exceed) `old`; None if a side is empty.

    Samples beyond `max_samples` are thinned evenly so the gate stays fast on long runs.
    """
    if not old or not new:
        return None
    from scipy.stats import mannwhitneyu  # lazy: heavy import, needed only here

    x, y = _thin(new, max_samples), _thin(old, max_samples)
    result = mannwhitneyu(x, y, alternative=alternative)
    u_new = float(result.statistic)
    p_value = float(result.pvalue)
    if math.isnan(p_value):
        p_value = 1.0
    effect = 2.0 * u_new / (len(x) * len(y)) - 1.0
    return MannWhitney(u_new, p_value, effect, len(y), len(x), alternative)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for a proportion; (0, 1) when n == 0."""
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes!r}, n={n!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence!r}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    z2n = z * z / n
    denom = 1 + z2n
    centre = (p + z2n / 2) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def ratio(new: float | None, old: float | None) -> float | None:
    """new / old, None when either is missing or old is not positive."""
    if new is None or old is None or old <= 0:
        return None
    return new / old


def _complete(cap: Capture) -> bool:
    return cap.error is None and not cap.cancelled and cap.status is not None \
        and cap.status < 400


def _thin(values: Sequence[float], limit: int) -> Sequence[float]:
    if len(values) <= limit:
        return values
    step = len(values) / limit
    return [values[int(i * step)] for i in range(limit)]
