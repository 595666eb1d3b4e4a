"""Confidence sequences: bounds that hold at every sample size at once (no I/O).

The gate is evaluated again and again while a cutover shadows, and the cutover acts at
the first evaluation that decides. A fixed-sample interval covers its parameter at 95 %
for one pre-planned look; looked at every few samples it does not. A confidence sequence
(Howard, Ramdas, McAuliffe, Sekhon 2021) covers it at every sample size simultaneously,
so a decision taken at any look, or never, keeps its error rate.

Both kinds here come from one test martingale, the Bernoulli likelihood ratio mixed
over a Beta prior (the conjugate "beta-binomial" mixture): for data x_i in [0, 1] with
mean p, M_t(p) = B(a + S, b + t - S) / B(a, b) / (p^S (1 - p)^(t - S)) is a nonnegative
supermartingale (x -> c^x d^(1-x) is convex, so bounded data is no worse than Bernoulli),
and by Ville's inequality P(exists t: M_t(p) >= 1/alpha) <= alpha. Hence
- `mean_bounds`: {p : M_t(p) < 1/alpha}, a confidence sequence for the mean of [0, 1]
  data (match rates, error rates, a sign statistic), with the Jeffreys prior Beta(1/2, 1/2);
- `quantile_ranks` / `quantile_bounds`: at the true p-quantile q, #{x_i <= q} is a sum of
  Bernoulli(p) (sub-Bernoulli with ties), so the counts M_t accepts bound the ranks
  between which q lies (Howard & Ramdas 2022, fixed-quantile sequences); the prior
  Beta(c p, c (1 - p)) is centred on p and tuned for power, never for validity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

__all__ = ["mean_bounds", "mean_bounds_array", "quantile_bounds", "quantile_prior",
           "quantile_rank_table", "quantile_ranks"]

_JEFFREYS = (0.5, 0.5)
_BISECT_STEPS = 60


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _log_mixture(s: float, t: float, p: float, a: float, b: float) -> float:
    """log M_t(p) for S = s successes in t trials (p strictly inside (0, 1))."""
    return (_log_beta(a + s, b + t - s) - _log_beta(a, b)
            - s * math.log(p) - (t - s) * math.log1p(-p))


def mean_bounds(total: float, n: int, alpha: float) -> tuple[float, float]:
    """Confidence sequence for the mean of n values in [0, 1] summing to `total`, at
    level 1 - alpha simultaneously over every n; (0, 1) for n == 0."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within (0, 1), got {alpha!r}")
    if n < 0 or not -1e-9 <= total <= n + 1e-9:
        raise ValueError(f"need 0 <= total <= n, got total={total!r}, n={n!r}")
    if n == 0:
        return 0.0, 1.0
    s = min(max(total, 0.0), float(n))
    a, b = _JEFFREYS
    level = math.log(1 / alpha)
    centre = s / n

    def inside(p: float) -> bool:
        return _log_mixture(s, n, p, a, b) < level

    low = 0.0 if centre <= 0 or inside(1e-12) else _bisect(inside, 1e-12, centre)
    high = 1.0 if centre >= 1 or inside(1 - 1e-12) else _bisect(inside, 1 - 1e-12, centre)
    return low, high


def _bisect(inside: Callable[[float], bool], outside_p: float, inside_p: float) -> float:
    """The boundary between an excluded p and an accepted one (the set is an interval)."""
    out, inn = outside_p, inside_p
    for _ in range(_BISECT_STEPS):
        mid = (out + inn) / 2
        if inside(mid):
            inn = mid
        else:
            out = mid
    return inn


def mean_bounds_array(total: NDArray[np.float64], n: NDArray[np.float64] | float,
                      alpha: float, steps: int = _BISECT_STEPS,
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`mean_bounds` over arrays (the calibration benchmark's many runs at once);
    `steps` bisection steps (30: within 1e-9)."""
    from scipy.special import betaln  # lazy: only vectorized callers need it

    s = np.asarray(total, dtype=float)
    t = np.broadcast_to(np.asarray(n, dtype=float), s.shape)
    a, b = _JEFFREYS
    level = math.log(1 / alpha)
    base = betaln(a + s, b + t - s) - betaln(a, b)
    centre = np.where(t > 0, s / np.maximum(t, 1), 0.5)

    def inside(p: NDArray[np.float64]) -> NDArray[np.bool_]:
        value = base - s * np.log(p) - (t - s) * np.log1p(-p)
        return np.asarray((value < level) | (t == 0))

    bounds = []
    for edge in (1e-12, 1 - 1e-12):
        out = np.full(s.shape, edge)
        inn = centre.copy()
        for _ in range(steps):
            mid = (out + inn) / 2
            ok = inside(mid)
            inn = np.where(ok, mid, inn)
            out = np.where(ok, out, mid)
        reaches = inside(np.full(s.shape, edge)) | (centre == (0.0 if edge < 0.5 else 1.0))
        bounds.append(np.where(reaches | (t == 0), 0.0 if edge < 0.5 else 1.0, inn))
    return bounds[0], bounds[1]


def quantile_prior(p: float) -> tuple[float, float]:
    """Beta prior centred on p: its spread matches the deviations seen near the sample
    sizes where a p-quantile check usually decides (p50: hundreds, p99: thousands)."""
    c = max(20.0, 1.0 / min(p, 1.0 - p))
    return c * p, c * (1.0 - p)


@lru_cache(maxsize=64)
def _rank_table(size: int, p: float, alpha: float) -> tuple[NDArray[np.int64],
                                                             NDArray[np.int64]]:
    from scipy.special import betaln

    a, b = quantile_prior(p)
    level = math.log(1 / alpha)
    t = np.arange(size + 1, dtype=float)

    def log_m(s: NDArray[np.float64]) -> NDArray[np.float64]:
        out: NDArray[np.float64] = (betaln(a + s, b + t - s) - betaln(a, b)
                                    - s * math.log(p) - (t - s) * math.log1p(-p))
        return out

    # log M is convex in s with its minimum near t p: search each side for the last
    # accepted count (integers, so bisection on [edge, centre]).
    centre = np.floor(t * p)
    tables = []
    for toward_zero in (True, False):
        inn = centre.copy()
        out = np.full_like(t, -1.0) if toward_zero else t + 1
        while np.any(np.abs(out - inn) > 1):
            mid = np.floor((out + inn) / 2)
            ok = log_m(np.clip(mid, 0, t)) < level
            inn = np.where(ok, mid, inn)
            out = np.where(ok, out, mid)
        tables.append(inn.astype(np.int64))
    low, high = tables
    accepted_centre = log_m(centre) < level  # the minimum itself may be rejected at t ~ 0
    low = np.where(accepted_centre, low, 0)
    high = np.where(accepted_centre, high, t.astype(np.int64))
    return low, high


def quantile_rank_table(size: int, p: float,
                        alpha: float) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(lowest, highest) count of samples <= the true p-quantile that is still plausible,
    for every sample size 0..size (tables grow in powers of two and are cached)."""
    if not 0 < p < 1 or not 0 < alpha < 1:
        raise ValueError(f"need 0 < p < 1 and 0 < alpha < 1, got p={p!r}, alpha={alpha!r}")
    grown = 1024
    while grown < size:
        grown *= 2
    low, high = _rank_table(grown, p, alpha)
    return low[:size + 1], high[:size + 1]


def quantile_ranks(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The plausible counts at sample size n (see `quantile_rank_table`)."""
    low, high = quantile_rank_table(n, p, alpha)
    return int(low[n]), int(high[n])


def quantile_bounds(ordered: Sequence[float], p: float,
                    alpha: float) -> tuple[float | None, float | None]:
    """Confidence sequence for the p-quantile from the sorted sample: (lower, upper);
    None where the sample cannot bound that side yet (too few samples)."""
    n = len(ordered)
    low_count, high_count = quantile_ranks(n, p, alpha)
    lower = ordered[low_count - 1] if low_count >= 1 else None
    upper = ordered[high_count] if high_count < n else None
    return lower, upper
