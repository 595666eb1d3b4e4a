"""Traffic and incremental order statistics for `gate_calibration.py` (numpy, many runs at once).

`draw_traffic` draws every request of every run in arrival order: which side answered
(0.5 % errors by default), whether it was streamed, whether new diverged, output lengths
and each role's TTFT and TPOT. Latency is a request's own cost (prompt and answer length:
`shared` sigma, the same for every side) times each side's engine noise; `noise` is the
sigma of the per-request log ratio new/old (each side's own noise sigma is noise / sqrt 2).
The iid cells are shared 0: every side draws independently.

Quantile checks read order statistics of a growing sample: a series is kept as its values
sorted plus the rank of each arrival, and a Fenwick tree over ranks per run answers "the
k-th smallest inserted so far" in log n numpy steps, vectorized across runs and series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from proxy.gate.sketch import FLOOR_S, PAIR_WIDTH, WIDTH

Array = NDArray[np.float64]
_NORMAL = NormalDist()
_LOG_STEP = math.log1p(WIDTH)
_PAIR_STEP = math.log1p(PAIR_WIDTH)


def mixture_quantiles(u: Array, sigma: float, tail_share: float = 0.0,
                      tail_factor: float = 1.0) -> Array:
    """Quantile function of lognormal(0, sigma), a `tail_share` of which is `tail_factor`
    times slower (a tail-only regression), at probabilities u."""
    grid = np.linspace(-8 * sigma - 1, 8 * sigma + np.log(max(tail_factor, 1.0)) + 1, 20001)
    z = np.vectorize(_NORMAL.cdf)
    cdf = (1 - tail_share) * z(grid / sigma)
    if tail_share:
        cdf = cdf + tail_share * z((grid - np.log(tail_factor)) / sigma)
    return np.asarray(np.exp(np.interp(u, cdf, grid)))


def tail_factor_for(sigma: float, p99_ratio: float, tail_share: float = 0.03) -> float:
    """The multiplier of a `tail_share` of requests that moves the p99 of lognormal(sigma)
    by `p99_ratio`."""
    base = float(mixture_quantiles(np.array([0.99]), sigma)[0])
    low, high = 1.0, 50.0
    for _ in range(60):
        mid = (low + high) / 2
        got = float(mixture_quantiles(np.array([0.99]), sigma, tail_share, mid)[0])
        low, high = (mid, high) if got < base * p99_ratio else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class Model:
    """What a cell's traffic is: latency spread, the true new version, errors, traffic."""

    shared_ttft: float = 0.0  # sigma of a request's own TTFT cost (prompt length)
    shared_tpot: float = 0.0
    noise: float = 0.15  # sigma of the per-request log ratio new/old (iid: 2 x side sigma^2)
    scale: float = 1.0  # new's TTFT and TPOT over old's (the whole body)
    ttft_tail: float = 1.0  # new's TTFT p99 over old's, by a 3 % tail
    tpot_tail: float = 1.0
    base_divergence: float = 0.02
    new_divergence: float = 0.02
    old_errors: float = 0.005
    new_errors: float = 0.005
    length_shift: float = 0.0  # P(new > old) - P(new < old) of output lengths
    paired_lengths: bool = True  # a matching answer has old's length (deterministic)
    streamed: float = 1.0  # share of requests streamed


TTFT_S, TPOT_S, LENGTH = 0.2, 0.02, 200.0
TAIL_SHARE = 0.03


@dataclass
class Traffic:
    """Every request of every run (runs, size), in arrival order. Roles: primary (old),
    baseline (a second old copy), shadow (new)."""

    ok: dict[str, NDArray[np.bool_]]  # complete answer per role
    streamed: NDArray[np.bool_]
    diverged_new: NDArray[np.bool_]
    diverged_base: NDArray[np.bool_]
    tokens: dict[str, NDArray[np.int64]]  # output tokens per role
    ttft: dict[str, Array]  # per role
    tpot: dict[str, Array]  # per role, drawn; the gate reads it back from e2e

    def e2e(self, role: str) -> Array:
        return np.asarray(self.ttft[role] + self.tpot[role] * (self.tokens[role] - 1))

    def metric(self, role: str, metric: str) -> tuple[Array, NDArray[np.bool_]]:
        """`metric` per request as `proxy.gate.tally` computes it from a capture, and
        whether the request gives that sample (a complete answer of that kind)."""
        e2e, ttft, tokens = self.e2e(role), self.ttft[role], self.tokens[role]
        ok = self.ok[role]
        if metric == "ttft":
            return ttft, ok & self.streamed
        if metric == "tpot":
            return (e2e - ttft) / np.maximum(tokens - 1, 1), ok & self.streamed & (tokens > 1)
        if metric == "e2e_unstreamed":
            return e2e, ok & ~self.streamed
        if metric == "tpot_unstreamed":
            return e2e / np.maximum(tokens, 1), ok & ~self.streamed & (tokens >= 1)
        raise ValueError(f"unknown metric {metric!r}")


def _length_scale(shift: float) -> float:
    """Independent lognormal(sigma 0.5) lengths scaled so that P(new > old) - P(new < old)
    = shift."""
    return math.exp(0.5 * math.sqrt(2) * _NORMAL.inv_cdf((1 + shift) / 2))


def draw_traffic(rng: np.random.Generator, runs: int, size: int, m: Model) -> Traffic:
    shape = (runs, size)
    ok = {"primary": rng.random(shape) >= m.old_errors,
          "baseline": rng.random(shape) >= m.old_errors,
          "shadow": rng.random(shape) >= m.new_errors}
    streamed = rng.random(shape) < m.streamed
    diverged_new = rng.random(shape) < m.new_divergence
    diverged_base = rng.random(shape) < m.base_divergence
    old_len = np.maximum(2, np.rint(LENGTH * rng.lognormal(0, 0.5, shape))).astype(np.int64)
    if m.paired_lengths:  # a diverged answer has a length of its own
        own = np.maximum(2, np.rint(LENGTH * rng.lognormal(0, 0.5, shape))).astype(np.int64)
        new_len = np.where(diverged_new, own, old_len)
        base_len = np.where(diverged_base, own[:, ::-1], old_len)
    else:
        scale = LENGTH * _length_scale(m.length_shift)
        new_len = np.maximum(2, np.rint(scale * rng.lognormal(0, 0.5, shape))).astype(np.int64)
        base_len = np.maximum(2, np.rint(LENGTH * rng.lognormal(0, 0.5, shape))
                              ).astype(np.int64)
    tokens = {"primary": old_len, "baseline": base_len, "shadow": new_len}
    side = m.noise / math.sqrt(2)
    ttft: dict[str, Array] = {}
    tpot: dict[str, Array] = {}
    for name, base_s, shared, tail, store in (
            ("ttft", TTFT_S, m.shared_ttft, m.ttft_tail, ttft),
            ("tpot", TPOT_S, m.shared_tpot, m.tpot_tail, tpot)):
        own_cost = rng.lognormal(0, shared, shape) if shared else np.ones(shape)
        for role in ("primary", "baseline", "shadow"):
            value = base_s * own_cost * rng.lognormal(0, side, shape)
            if role == "shadow":
                value = value * m.scale
                if tail != 1.0:
                    marginal = math.sqrt(shared ** 2 + side ** 2)
                    factor = tail_factor_for(marginal, tail, TAIL_SHARE)
                    value = np.where(rng.random(shape) < TAIL_SHARE, value * factor, value)
            store[role] = value
    return Traffic(ok, streamed, diverged_new, diverged_base, tokens, ttft, tpot)


@dataclass
class Series:
    """One role's samples of one metric for every run: values by rank, each arrival's
    rank, and which arrivals count (a complete answer of that kind)."""

    by_rank: Array  # (runs, size) ascending per run (uncounted ones included)
    rank: NDArray[np.int64]  # (runs, size): rank of the i-th arrival
    counts: NDArray[np.bool_]  # (runs, size)

    @classmethod
    def of(cls, values: Array, counts: NDArray[np.bool_]) -> Series:
        order = np.argsort(values, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(values.shape[1])[None, :], axis=1)
        return cls(np.take_along_axis(values, order, axis=1), rank, counts)


class RankTrees:
    """Fenwick trees over ranks, one per (series, run): insert arrivals, ask k-th."""

    def __init__(self, series: int, runs: int, size: int) -> None:
        self.size = size
        self.tree = np.zeros((series, runs, size + 1), dtype=np.int32)
        self.top = 1 << int(np.floor(np.log2(size)))
        self.runs = np.arange(runs)

    def insert(self, series: int, ranks: NDArray[np.int64], mask: NDArray[np.bool_]) -> None:
        """Add rank `ranks[r]` to tree `series` of run r where `mask[r]`."""
        r = self.runs[mask]
        idx = ranks[mask] + 1
        while len(idx):
            self.tree[series, r, idx] += 1
            idx = idx + (idx & -idx)
            live = idx <= self.size
            r, idx = r[live], idx[live]

    def kth(self, series: int, k: NDArray[np.int64]) -> NDArray[np.int64]:
        """Rank of the k-th smallest inserted (1-based k) per run; -1 where k < 1."""
        tree = self.tree[series]
        pos = np.zeros(len(self.runs), dtype=np.int64)
        left = k.astype(np.int64).copy()
        step = self.top
        while step:
            nxt = pos + step
            inside = nxt <= self.size
            here = np.where(inside, tree[self.runs, np.minimum(nxt, self.size)], 0)
            go = inside & (here < left)
            pos = np.where(go, nxt, pos)
            left = np.where(go, left - here, left)
            step >>= 1
        return np.where((k >= 1) & (pos < self.size), pos, -1)


def bucket_edges(values: Array) -> tuple[Array, Array]:
    """The lower and upper edge of each value's `proxy.gate.sketch` bucket (what the
    store's tails read a rank as)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        bucket = np.where(values > FLOOR_S,
                          1 + np.floor(np.log(values / FLOOR_S) / _LOG_STEP), 0)
    low = np.where(bucket <= 0, 0.0, FLOOR_S * np.exp((bucket - 1) * _LOG_STEP))
    return low, FLOOR_S * np.exp(bucket * _LOG_STEP)


def pair_buckets(values: Array) -> NDArray[np.int64]:
    """`proxy.gate.sketch.pair_bucket_of` of each value (0 for NaN and values up to FLOOR_S)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(values > FLOOR_S,
                       1 + np.floor(np.log(values / FLOOR_S) / _PAIR_STEP), 0)
    return np.nan_to_num(out, nan=0.0).astype(np.int64)
