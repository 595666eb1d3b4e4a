"""The gate of `gate_calibration.py`, vectorized over runs, and the one-look test planned for
a fixed horizon that the benchmark prices it against.

`gate_verdict` is `proxy.gate.verdict.evaluate` at the default criteria for records with a
baseline (every check's rule, alpha and window as `checks.py` and `latency_checks.py`
write them, on the gate's own `sequential` bounds): samples, match rate, paired p50 of
each latency metric, the paired p99 (every pair since the start in 1 % buckets, three bets
at every bucket: `latency_checks.TailCounts`; the fail side on the store's bucketed
tails), output lengths and
errors (the paired test on each run's new-only and old-only error counts: every simulated
request went to both sides); a family of traffic without samples is not judged. The
benchmark checks it against `evaluate` itself on some runs of every cell and counts
mismatches.

`fixed_pass` is the same checks done once at a planned sample size with exact one-look
bounds at the pass side's alpha: Clopper-Pearson for rates (errors unpaired, as before),
the exact sign test for the paired p50, and for the paired p99 at every 1 % bucket any
of three exact tests at a third of the alpha (new's rate below 1 %, old's above, the
sign test of the pairs that differ: the same three as the gate's bets, Bonferroni). Statuses are arrays of 0 fail, 1 inconclusive, 2 pass per run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from proxy.gate.sequential import (
    TAIL_WEIGHTS,
    mean_bounds_array,
    paired_log_wealth_array,
    tail_log_evidence,
    tail_log_parts,
)
from proxy.gate.verdict import GateCriteria

Array = NDArray[np.float64]
Status = NDArray[np.int64]
FAIL, INCONCLUSIVE, PASS = 0, 1, 2
FAMILIES = {"streamed": ("ttft", "tpot"), "unstreamed": ("e2e_unstreamed", "tpot_unstreamed")}
# order statistic (metric, role "old"/"new", 1-based rank per run) -> its bucket's low and
# high edge (what the store's tails read) and its exact value (NaN where none)
OrderStat = Callable[[str, str, NDArray[np.int64]], tuple[Array, Array, Array]]


def status(passed: NDArray[np.bool_], failed: NDArray[np.bool_]) -> Status:
    return np.where(failed, FAIL, np.where(passed, PASS, INCONCLUSIVE))


@dataclass
class Look:
    """What one look sees, per run (arrays over runs)."""

    n: int  # requests mirrored a side
    compared: Array  # new-vs-old deterministic comparisons (both answered)
    diverged: Array
    base_compared: Array
    base_diverged: Array
    errors_new: Array
    errors_old: Array
    new_only: Array  # pairs (every request: both sides answer each) where only new errored
    old_only: Array
    length_pairs: Array  # primary/shadow output-token pairs in the newest-records window
    length_signs: Array  # sum of sign(new - old) over them
    pairs: Mapping[str, tuple[Array, Array]]  # metric -> (pairs in window, new beyond limit)
    tail_n: Mapping[str, tuple[Array, Array]]  # metric -> (old's, new's samples since start)
    order_stat: OrderStat
    pairs_n: Mapping[str, Array]  # metric -> (baseline, shadow) pairs since the start
    # metric -> (new_over, old_over, gain, loss) per run and 1 % bucket, as
    # `latency_checks.TailCounts` counts them (column 0 at or below every pair)
    tail_counts: Callable[[str], tuple[NDArray[np.int64], ...]]


class Bounds:
    """`mean_bounds_array` over rows gathered per alpha, computed once per look."""

    def __init__(self) -> None:
        self.rows: dict[float, list[tuple[Array, Array]]] = {}

    def ask(self, alpha: float, total: Array, n: Array) -> int:
        self.rows.setdefault(alpha, []).append((total, n))
        return len(self.rows[alpha]) - 1

    def solve(self) -> dict[float, tuple[Array, Array]]:
        out = {}
        for alpha, rows in self.rows.items():
            total = np.stack([r[0] for r in rows]).astype(float)
            n = np.stack([np.broadcast_to(r[1], r[0].shape) for r in rows]).astype(float)
            out[alpha] = mean_bounds_array(np.minimum(total, n), n, alpha, steps=44)
        return out


def gate_verdict(look: Look, c: GateCriteria,
                 ranks: Mapping[float, tuple[NDArray[np.int64], NDArray[np.int64]]],
                 ) -> tuple[Status, dict[str, Status]]:
    """The gate's verdict per run, and each check's status by name (the check names of
    `gate.evaluate`); `ranks`: alpha -> `quantile_rank_table(size, 0.99, alpha)`."""
    pa, fa = c.pass_alpha(), c.fail_alpha()
    b = Bounds()
    n = np.full(look.compared.shape, float(look.n))
    match = (b.ask(pa / 2, look.compared - look.diverged, look.compared),
             b.ask(fa / 2, look.compared - look.diverged, look.compared),
             b.ask(pa / 2, look.base_compared - look.base_diverged, look.base_compared),
             b.ask(fa / 2, look.base_compared - look.base_diverged, look.base_compared))
    successes = (look.length_signs + look.length_pairs) / 2
    lengths = (b.ask(pa, successes, look.length_pairs), b.ask(fa, successes, look.length_pairs))
    paired = {m: (b.ask(pa, slower, count), b.ask(fa, slower, count))
              for m, (count, slower) in look.pairs.items()}
    got = b.solve()

    def lo(alpha: float, i: int) -> Array:
        return got[alpha][0][i]

    def hi(alpha: float, i: int) -> Array:
        return got[alpha][1][i]

    checks = [status(look.compared >= c.min_samples, np.zeros(n.shape, bool))]
    m = c.max_excess_divergence
    passed = lo(pa / 2, match[0]) >= hi(pa / 2, match[2]) - m
    checks.append(np.where((look.base_compared < c.min_baseline_samples) & passed
                           & ~(hi(fa / 2, match[1]) < lo(fa / 2, match[3]) - m), INCONCLUSIVE,
                           status(passed, hi(fa / 2, match[1]) < lo(fa / 2, match[3]) - m)))
    excess = c.max_error_rate_excess  # the paired test, one a side at its whole alpha
    checks.append(status(
        paired_log_wealth_array(n, look.new_only, look.old_only, excess, "pass")
        >= math.log(1 / pa),
        paired_log_wealth_array(n, look.new_only, look.old_only, excess, "fail")
        >= math.log(1 / fa)))
    shift = c.max_length_shift
    if shift is not None:
        s_low, s_high = 2 * lo(pa, lengths[0]) - 1, 2 * hi(pa, lengths[0]) - 1
        f_low, f_high = 2 * lo(fa, lengths[1]) - 1, 2 * hi(fa, lengths[1]) - 1
        few = look.length_pairs < c.min_latency_samples
        checks.append(np.where(few, INCONCLUSIVE,
                               status((s_low >= -shift) & (s_high <= shift),
                                      (f_low > shift) | (f_high < -shift))))
    evidence = {family: np.any([look.tail_n[m][0] + look.tail_n[m][1] > 0 for m in metrics],
                               axis=0) for family, metrics in FAMILIES.items()}
    names = ["samples", "match_rate", "errors"] + (["lengths"] if shift is not None else [])
    latency: list[Status] = []
    for entry, limit in c.enabled_limits():
        applies = evidence[entry.family]
        floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
        if entry.quantile == 0.5:
            count, _slower = look.pairs[entry.metric]
            i_pass, i_fail = paired[entry.metric]
            judged = status(hi(pa, i_pass) < 0.5, lo(fa, i_fail) > 0.5)
            judged = np.where(count < c.min_latency_samples, INCONCLUSIVE, judged)
        else:
            judged = _paired_tail(look, entry.metric, limit, floor, c, ranks)
        latency.append(np.where(applies, judged, PASS))
        names.append(entry.field)
    any_evidence = np.any(list(evidence.values()), axis=0)
    checks += [np.where(any_evidence, s, INCONCLUSIVE) for s in latency] or [
        np.where(any_evidence, PASS, INCONCLUSIVE)]
    return np.asarray(np.min(np.stack(checks), axis=0)), dict(zip(names, checks, strict=False))


_SURE: dict[tuple[float, int], tuple[NDArray[np.int64], NDArray[np.int64]]] = {}


def sure_counts(level: float, size: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per n pairs 0..size: the most new-over counts with which new's rate alone reaches
    `level` less the log of its weight (-1: none), and the fewest old-over counts with
    which old's rate alone does (size + 1: none). At `level` = ln(1/alpha) a bucket past
    either passes whatever the rest: the weighted mean is at least one part times its
    weight."""
    key = (level, size)
    if key not in _SURE:
        n = np.arange(size + 1, dtype=float)
        zero = np.zeros_like(n)

        def new_ok(x: Array) -> NDArray[np.bool_]:
            return np.asarray(tail_log_parts(n, x, zero, zero, zero)[1]
                              >= level - math.log(TAIL_WEIGHTS[1]))

        def old_ok(y: Array) -> NDArray[np.bool_]:
            return np.asarray(tail_log_parts(n, zero, y, zero, zero)[2]
                              >= level - math.log(TAIL_WEIGHTS[2]))

        # new's rate falls as x grows: the last x that passes (-1: none)
        low, high = np.full_like(n, -1.0), n + 1
        while np.any(high - low > 1):
            mid = np.floor((low + high) / 2)
            ok = new_ok(np.maximum(mid, 0))
            low, high = np.where(ok, mid, low), np.where(ok, high, mid)
        most_new = low.astype(np.int64)
        # old's rate grows with y: the first y that passes (size + 1: none)
        low, high = np.full_like(n, -1.0), n + 1
        while np.any(high - low > 1):
            mid = np.floor((low + high) / 2)
            ok = old_ok(np.maximum(mid, 0))
            low, high = np.where(ok, low, mid), np.where(ok, mid, high)
        reached = old_ok(np.minimum(high, n)) & (high <= n)
        fewest_old = np.where(reached, high, size + 1).astype(np.int64)
        _SURE[key] = (most_new, fewest_old)
    return _SURE[key]


def _paired_tail(look: Look, metric: str, limit: float, floor: float, c: GateCriteria,
                 ranks: Mapping[float, tuple[NDArray[np.int64], NDArray[np.int64]]],
                 ) -> Status:
    old_n, new_n = look.tail_n[metric]
    fail_side = c.fail_alpha() / 2
    o_high = _upper(look, metric, "old", old_n, fail_side, ranks)
    n_low = _lower(look, metric, "new", new_n, fail_side, ranks)
    level = math.log(1 / c.pass_alpha())
    pairs = look.pairs_n[metric].astype(np.int64)
    new_over, old_over, gain, loss = look.tail_counts(metric)
    most_new, fewest_old = sure_counts(level, int(pairs.max(initial=0)))
    # buckets not surely passed: new_over > most_new (a prefix: new_over falls with k)
    # and old_over < fewest_old (a suffix, old_over falls too): [first, last)
    last = np.sum(new_over > most_new[pairs][:, None], axis=1)
    first = np.sum(old_over >= fewest_old[pairs][:, None], axis=1)
    span = int(max(1, (last - first).max(initial=0)))
    column = first[:, None] + np.arange(span)[None, :]
    unsure = column < last[:, None]
    k = np.minimum(column, new_over.shape[1] - 1)

    def at(counts: NDArray[np.int64]) -> Array:
        return np.take_along_axis(counts, k, axis=1).astype(float)

    evidence = tail_log_evidence(np.broadcast_to(pairs[:, None], k.shape).astype(float),
                                 at(new_over), at(old_over), at(gain), at(loss))
    passed = np.all((evidence >= level) | ~unsure, axis=1)
    with np.errstate(invalid="ignore"):
        failed = n_low > np.maximum(limit * o_high, o_high + floor)
    judged = status(passed, failed & ~np.isnan(n_low) & ~np.isnan(o_high))
    few = np.minimum(np.minimum(old_n, new_n), pairs) < c.min_latency_samples
    return np.where(few, INCONCLUSIVE, judged)


def _lower(look: Look, metric: str, role: str, size: Array, alpha: float,
           ranks: Mapping[float, tuple[NDArray[np.int64], NDArray[np.int64]]]) -> Array:
    count = ranks[alpha][0][size.astype(np.int64)]
    value = look.order_stat(metric, role, count)[0]
    return np.where(count >= 1, value, np.nan)


def _upper(look: Look, metric: str, role: str, size: Array, alpha: float,
           ranks: Mapping[float, tuple[NDArray[np.int64], NDArray[np.int64]]]) -> Array:
    count = ranks[alpha][1][size.astype(np.int64)] + 1
    value = look.order_stat(metric, role, np.where(count <= size, count, 0))[1]
    return np.where(count <= size, value, np.nan)


def clopper_pearson(k: Array, n: Array, tail: float) -> tuple[Array, Array]:
    """One-sided exact bounds at `tail` each (k may be fractional: the beta form)."""
    from scipy.stats import beta

    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k <= 0, 0.0, beta.ppf(tail, np.maximum(k, 1e-9), n - k + 1))
        high = np.where(k >= n, 1.0, beta.ppf(1 - tail, k + 1, np.maximum(n - k, 1e-9)))
    return np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)


def fixed_pass(look: Look, c: GateCriteria) -> NDArray[np.bool_]:
    """Whether the one-look test planned for n = look.n passes, per run: every check's
    pass side at the gate's pass alpha (split as the gate splits it), exact tests on every
    sample since the start."""
    from scipy.stats import binom

    pa = c.pass_alpha()
    n = np.full(look.compared.shape, float(look.n))
    ok = look.compared >= c.min_samples
    low = clopper_pearson(look.compared - look.diverged, look.compared, pa / 2)[0]
    b_high = clopper_pearson(look.base_compared - look.base_diverged, look.base_compared,
                             pa / 2)[1]
    ok &= low >= b_high - c.max_excess_divergence
    high = clopper_pearson(look.errors_new, n, pa / 2)[1]
    o_low = clopper_pearson(look.errors_old, n, pa / 2)[0]
    ok &= high <= o_low + c.max_error_rate_excess
    if c.max_length_shift is not None:  # two one-sided tests, each at the pass alpha
        s_low, s_high = clopper_pearson((look.length_signs + look.length_pairs) / 2,
                                        look.length_pairs, pa)
        ok &= (2 * s_low - 1 >= -c.max_length_shift) & (2 * s_high - 1 <= c.max_length_shift)
    third = pa / 3
    for entry, _limit in c.enabled_limits():
        old_n, new_n = look.tail_n[entry.metric]
        if not np.any(old_n + new_n):
            continue
        if entry.quantile == 0.5:  # the exact sign test, one-sided
            count, slower = look.pairs[entry.metric]
            ok &= clopper_pearson(slower, count, pa)[1] < 0.5
            continue
        # at every 1 % bucket one of three exact one-sided tests at a third of alpha
        pairs = look.pairs_n[entry.metric][:, None]
        new_over, old_over, gain, loss = look.tail_counts(entry.metric)
        explained = ((binom.cdf(new_over, pairs, 0.01) <= third)
                     | (binom.sf(old_over - 1, pairs, 0.01) <= third)
                     | (binom.sf(gain - 1, gain + loss, 0.5) <= third))
        ok &= np.all(explained, axis=1) & (pairs[:, 0] > 0)
    return np.asarray(ok)
