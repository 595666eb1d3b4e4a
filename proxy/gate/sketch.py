"""Every latency sample since evidence began, in bounded memory, for the quantile checks.

The gate's p99 bounds tighten only while their evidence grows. Sorted samples of the
newest `tally.LATENCY_WINDOW` records stopped growing there: under CPU load an identical
new version's TTFT p99 bounds stayed at 0.72..1.27 after 9,500 requests a side (limit
1.25), so it waited for the analysis timeout. A `LogHistogram` keeps a count per
log-spaced bucket of relative width `WIDTH` instead: memory bounded by the number of
buckets the values fall in (a few thousand at most), whatever the traffic.

Validity: a confidence sequence for a quantile bounds *ranks* (the count of samples at or
below it). The sample at a rank lies in a known bucket, so a lower bound reads the
bucket's lower edge and an upper bound its upper edge (`low` / `high`): the bounds are
those of the exact samples widened by at most one bucket (0.1 %), never narrowed, and the
error guarantee holds as for the exact samples.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

WIDTH = 0.001  # relative width of a bucket: bounds widened by at most 0.1 %
FLOOR_S = 1e-6  # values at or below one microsecond share bucket 0, from 0
_LOG_STEP = math.log1p(WIDTH)


class Ranked(Protocol):
    """A sample read by rank: `low(k)` <= the k-th smallest value <= `high(k)` (1-based)."""

    def __len__(self) -> int: ...

    def low(self, rank: int) -> float: ...

    def high(self, rank: int) -> float: ...


@dataclass(frozen=True)
class SortedSample:
    """Exact samples (the Prometheus path and tests): both sides of a rank are its value."""

    values: Sequence[float]

    @classmethod
    def of(cls, values: Iterable[float]) -> SortedSample:
        return cls(sorted(values))

    def __len__(self) -> int:
        return len(self.values)

    def low(self, rank: int) -> float:
        return self.values[rank - 1]

    def high(self, rank: int) -> float:
        return self.values[rank - 1]


def bucket_of(value: float) -> int:
    """The bucket holding `value`: 0 up to FLOOR_S, then [FLOOR_S (1+WIDTH)^(i-1),
    FLOOR_S (1+WIDTH)^i)."""
    if not value > FLOOR_S:  # NaN too: never a latency, kept out of the tail's way
        return 0
    return 1 + int(math.log(value / FLOOR_S) / _LOG_STEP)


def lower_edge(bucket: int) -> float:
    return 0.0 if bucket <= 0 else FLOOR_S * math.exp((bucket - 1) * _LOG_STEP)


def upper_edge(bucket: int) -> float:
    return FLOOR_S * math.exp(bucket * _LOG_STEP)


@dataclass
class LogHistogram:
    """Counts of values per log-spaced bucket; read by rank with edges that bracket the
    exact sample's order statistics. Grows by `add`; `frozen()` is a copy for a verdict."""

    counts: dict[int, int] = field(default_factory=dict)
    _n: int = 0
    _keys: list[int] | None = None  # sorted buckets and cumulative counts, built lazily
    _cumulative: list[int] | None = None

    def add(self, values: Iterable[float]) -> None:
        for value in values:
            bucket = bucket_of(value)
            self.counts[bucket] = self.counts.get(bucket, 0) + 1
            self._n += 1
        self._keys = self._cumulative = None

    def frozen(self) -> LogHistogram:
        return LogHistogram(dict(self.counts), self._n)

    def __len__(self) -> int:
        return self._n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogHistogram) and self.counts == other.counts

    def _bucket_at(self, rank: int) -> int:
        if not 1 <= rank <= self._n:
            raise IndexError(f"rank {rank} outside 1..{self._n}")
        if self._keys is None or self._cumulative is None:
            self._keys = sorted(self.counts)
            self._cumulative = list(accumulate(self.counts[k] for k in self._keys))
        return self._keys[bisect_left(self._cumulative, rank)]

    def low(self, rank: int) -> float:
        return lower_edge(self._bucket_at(rank))

    def high(self, rank: int) -> float:
        return upper_edge(self._bucket_at(rank))

    def __getstate__(self) -> dict[str, object]:  # pickled across the worker boundary
        return {"counts": self.counts, "_n": self._n}

    def __setstate__(self, state: dict[str, object]) -> None:
        counts = state["counts"]
        n = state["_n"]
        assert isinstance(counts, dict) and isinstance(n, int)
        self.counts, self._n, self._keys, self._cumulative = counts, n, None, None


# Pairs: every (old, new) pair since evidence began, in joint buckets 1 % wide (coarser than
# the marginal tails: the joint cells grow with both spreads). The paired p99 check reads
# them (`proxy.gate.latency_checks`).
PAIR_WIDTH = 0.01
_PAIR_STEP = math.log1p(PAIR_WIDTH)


def pair_bucket_of(value: float) -> int:
    """The 1 % bucket holding `value`: 0 up to FLOOR_S, then [pair_edge(i), pair_edge(i+1))."""
    if not value > FLOOR_S:
        return 0
    return 1 + int(math.log(value / FLOOR_S) / _PAIR_STEP)


def pair_edge(bucket: int) -> float:
    """The lower edge of 1 % bucket `bucket` (the upper edge of the one below)."""
    return 0.0 if bucket <= 0 else FLOOR_S * math.exp((bucket - 1) * _PAIR_STEP)


def pair_edges(buckets: NDArray[np.int64]) -> NDArray[np.float64]:
    """`pair_edge` of each bucket."""
    out: NDArray[np.float64] = np.where(
        buckets <= 0, 0.0, FLOOR_S * np.exp((np.maximum(buckets, 1) - 1) * _PAIR_STEP))
    return out


def last_edge_below(y: NDArray[np.float64]) -> NDArray[np.int64]:
    """For each y, the largest bucket j whose lower edge is below y, so that
    y > pair_edge(k + 1) exactly when k <= j - 1 (checked against the edges themselves)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.where(y > FLOOR_S, np.floor(np.log(y / FLOOR_S) / _PAIR_STEP) + 1, 0)
    j = guess.astype(np.int64)
    j = np.where(pair_edges(j) < y, j, j - 1)
    j = np.where(pair_edges(j + 1) < y, j + 1, j)
    out: NDArray[np.int64] = np.maximum(j, 0)
    return out


@dataclass
class PairHistogram:
    """Counts of (old, new) pairs per joint 1 % bucket: memory bounded by the cells the
    pairs fall in, whatever the traffic. Grows by `add`; `frozen()` is a copy."""

    counts: dict[tuple[int, int], int] = field(default_factory=dict)
    _n: int = 0

    def add(self, old: float, new: float) -> None:
        cell = (pair_bucket_of(old), pair_bucket_of(new))
        self.counts[cell] = self.counts.get(cell, 0) + 1
        self._n += 1

    def frozen(self) -> PairHistogram:
        return PairHistogram(dict(self.counts), self._n)

    def __len__(self) -> int:
        return self._n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PairHistogram) and self.counts == other.counts
