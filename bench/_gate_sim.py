"""Draws and incremental order statistics for `gate_calibration.py` (numpy, many runs at once).

A run's samples of one series (say new's TTFT) are drawn as sorted values plus a random
arrival order: the k-th smallest of the first n arrivals is then a "k-th inserted rank"
query on a Fenwick tree over ranks, vectorized across runs and across series, so each
look costs a few dozen numpy operations whatever n is.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

_NORMAL = NormalDist()


def mixture_quantiles(u: NDArray[np.float64], sigma: float, scale: float = 1.0,
                      tail_share: float = 0.0, tail_factor: float = 1.0) -> NDArray[np.float64]:
    """Quantile function of lognormal(0, sigma) * scale, a `tail_share` of which is
    `tail_factor` times slower (a tail-only regression), at probabilities u."""
    grid = np.linspace(-8 * sigma - 1, 8 * sigma + np.log(max(tail_factor, 1.0)) + 1, 20001)
    z = np.vectorize(_NORMAL.cdf)
    cdf = (1 - tail_share) * z(grid / sigma)
    if tail_share:
        cdf = cdf + tail_share * z((grid - np.log(tail_factor)) / sigma)
    return np.asarray(scale * np.exp(np.interp(u, cdf, grid)))


def tail_factor_for(sigma: float, p99_ratio: float, tail_share: float = 0.03) -> float:
    """The multiplier of a `tail_share` of requests that moves the p99 by `p99_ratio`."""
    base = float(mixture_quantiles(np.array([0.99]), sigma)[0])
    low, high = 1.0, 50.0
    for _ in range(60):
        mid = (low + high) / 2
        got = float(mixture_quantiles(np.array([0.99]), sigma, 1.0, tail_share, mid)[0])
        low, high = (mid, high) if got < base * p99_ratio else (low, mid)
    return (low + high) / 2


@dataclass
class Series:
    """One role's samples of one quantity for every run: values by rank, arrival ranks."""

    by_rank: NDArray[np.float64]  # (runs, n) ascending per run
    arrival: NDArray[np.int64]  # (runs, n): rank of the i-th arrival

    def arrived(self, n: int) -> NDArray[np.float64]:
        """(runs, n) values of the first n arrivals, in arrival order."""
        return np.take_along_axis(self.by_rank, self.arrival[:, :n], axis=1)


def draw(rng: np.random.Generator, runs: int, n: int, sigma: float, scale: float = 1.0,
         tail_share: float = 0.0, tail_factor: float = 1.0) -> Series:
    spacings = rng.exponential(size=(runs, n + 1))
    u = np.cumsum(spacings, axis=1)
    u = u[:, :n] / u[:, n:]  # sorted uniforms (order statistics), O(n) per run
    values = mixture_quantiles(u, sigma, scale, tail_share, tail_factor)
    arrival = rng.permuted(np.tile(np.arange(n), (runs, 1)), axis=1)
    return Series(values, arrival)


class RankTrees:
    """Fenwick trees over ranks, one per (series, run): insert arrivals, ask k-th."""

    def __init__(self, series: int, runs: int, size: int) -> None:
        self.size = size
        self.tree = np.zeros((series, runs, size + 1), dtype=np.int32)
        self.top = 1 << int(np.floor(np.log2(size)))
        self.runs = np.arange(runs)

    def insert(self, series: NDArray[np.int64], ranks: NDArray[np.int64]) -> None:
        """Add rank `ranks[j, r]` to tree `series[j]` of run r, for every j; the series
        of one call must differ (so no two updates of a level hit the same cell)."""
        s = np.repeat(series[:, None], len(self.runs), axis=1).ravel()
        r = np.tile(self.runs, len(series))
        idx = ranks.ravel() + 1
        while len(idx):
            self.tree[s, r, idx] += 1
            idx = idx + (idx & -idx)
            live = idx <= self.size
            s, r, idx = s[live], r[live], idx[live]

    def kth(self, series: NDArray[np.int64], k: NDArray[np.int64]) -> NDArray[np.int64]:
        """Rank of the k-th smallest inserted (1-based k) per (series[j], run); -1 if k
        is outside 1..inserted."""
        s = np.repeat(series[:, None], len(self.runs), axis=1)
        r = np.broadcast_to(self.runs, s.shape)
        pos = np.zeros(s.shape, dtype=np.int64)
        left = k.astype(np.int64).copy()
        step = self.top
        while step:
            nxt = pos + step
            inside = nxt <= self.size
            here = np.where(inside, self.tree[s, r, np.minimum(nxt, self.size)], 0)
            go = inside & (here < left)
            pos = np.where(go, nxt, pos)
            left = np.where(go, left - here, left)
            step >>= 1
        return np.where((k >= 1) & (pos < self.size), pos, -1)

    def below(self, series: NDArray[np.int64], ranks: NDArray[np.int64]) -> NDArray[np.int64]:
        """How many inserted ranks are < `ranks[j, r]` (prefix sums)."""
        s = np.repeat(series[:, None], len(self.runs), axis=1)
        r = np.broadcast_to(self.runs, s.shape)
        idx = ranks.astype(np.int64).copy()
        total = np.zeros(s.shape, dtype=np.int64)
        while True:
            live = idx > 0
            if not live.any():
                return total
            total += np.where(live, self.tree[s, r, np.maximum(idx, 0)], 0)
            idx = np.where(live, idx - (idx & -idx), 0)


def value_at(series: Series, ranks: NDArray[np.int64]) -> NDArray[np.float64]:
    """Values at ranks per run (NaN where rank is -1)."""
    safe = np.maximum(ranks, 0)
    got = np.take_along_axis(series.by_rank, safe[:, None], axis=1)[:, 0]
    return np.where(ranks >= 0, got, np.nan)
