"""The gate of `gate_calibration.py`, vectorized over runs, and the one-look test planned for
a fixed horizon that the benchmark prices it against.

`gate_verdict` is `proxy.gate.verdict.evaluate` at the default criteria for records with a
baseline (every check's rule, alpha and window as `checks.py` and `latency_checks.py`
write them, on the gate's own `sequential` bounds): samples, match rate, paired p50 of
each latency metric, quantile-ratio p99 on the store's bucketed tails, output lengths and
errors (the paired test on each run's new-only and old-only error counts: every simulated
request went to both sides); a family of traffic without samples is not judged. The
benchmark checks it against `evaluate` itself on some runs of every cell and counts
mismatches.

`fixed_pass` is the same checks done once at a planned sample size with exact one-look
bounds at the pass side's alpha: Clopper-Pearson for rates (errors unpaired, as before),
the exact sign test for the paired p50, binomial order-statistic bounds for p99. Statuses
are arrays of 0 fail, 1 inconclusive, 2 pass per run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from proxy.gate.sequential import mean_bounds_array, paired_log_wealth_array
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
            judged = _quantile_ratio(look, entry.metric, entry.quantile, limit, floor, c,
                                     ranks)
        latency.append(np.where(applies, judged, PASS))
        names.append(entry.field)
    any_evidence = np.any(list(evidence.values()), axis=0)
    checks += [np.where(any_evidence, s, INCONCLUSIVE) for s in latency] or [
        np.where(any_evidence, PASS, INCONCLUSIVE)]
    return np.asarray(np.min(np.stack(checks), axis=0)), dict(zip(names, checks, strict=False))


def _quantile_ratio(look: Look, metric: str, q: float, limit: float, floor: float,
                    c: GateCriteria,
                    ranks: Mapping[float, tuple[NDArray[np.int64], NDArray[np.int64]]],
                    ) -> Status:
    assert q == 0.99, "the benchmark's traffic always has a baseline: p50 is paired"
    old_n, new_n = look.tail_n[metric]
    pass_side, fail_side = c.pass_alpha() / 2, c.fail_alpha() / 2

    def lower(role: str, size: Array, alpha: float) -> Array:
        count = ranks[alpha][0][size.astype(np.int64)]
        value = look.order_stat(metric, role, count)[0]
        return np.where(count >= 1, value, np.nan)

    def upper(role: str, size: Array, alpha: float) -> Array:
        count = ranks[alpha][1][size.astype(np.int64)] + 1
        value = look.order_stat(metric, role, np.where(count <= size, count, 0))[1]
        return np.where(count <= size, value, np.nan)

    o_low, o_high = lower("old", old_n, pass_side), upper("old", old_n, fail_side)
    n_low, n_high = lower("new", new_n, fail_side), upper("new", new_n, pass_side)
    with np.errstate(invalid="ignore"):
        failed = n_low > np.maximum(limit * o_high, o_high + floor)
        passed = n_high <= np.maximum(limit * o_low, o_low + floor)
    judged = status(passed & ~np.isnan(n_high) & ~np.isnan(o_low),
                    failed & ~np.isnan(n_low) & ~np.isnan(o_high))
    return np.where(np.minimum(old_n, new_n) < c.min_latency_samples, INCONCLUSIVE, judged)


def clopper_pearson(k: Array, n: Array, tail: float) -> tuple[Array, Array]:
    """One-sided exact bounds at `tail` each (k may be fractional: the beta form)."""
    from scipy.stats import beta

    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k <= 0, 0.0, beta.ppf(tail, np.maximum(k, 1e-9), n - k + 1))
        high = np.where(k >= n, 1.0, beta.ppf(1 - tail, k + 1, np.maximum(n - k, 1e-9)))
    return np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)


def fixed_ranks(size: int, q: float, tail: float) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """One-look order-statistic bounds for the q-quantile at every n 0..size: X_(l) <= it
    and X_(u) >= it, each with probability >= 1 - tail (l: 0 / u: n + 1 where none)."""
    from scipy.stats import binom

    n = np.arange(size + 1)
    low = binom.ppf(tail, n, q).astype(np.int64)  # P(Bin >= l) >= 1 - tail
    high = binom.ppf(1 - tail, n, q).astype(np.int64) + 1  # P(Bin <= u - 1) >= 1 - tail
    return low, high


def fixed_pass(look: Look, c: GateCriteria,
               ranks: tuple[NDArray[np.int64], NDArray[np.int64]]) -> NDArray[np.bool_]:
    """Whether the one-look test planned for n = look.n passes, per run: every check's
    pass side at the gate's pass alpha (halved where two bounds decide it), exact bounds
    on every sample since the start. `ranks`: `fixed_ranks(size, 0.99, pass_alpha / 2)`."""
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
    for entry, limit in c.enabled_limits():
        old_n, new_n = look.tail_n[entry.metric]
        if not np.any(old_n + new_n):
            continue
        floor = c.token_latency_floor_s if entry.per_token else c.latency_floor_s
        if entry.quantile == 0.5:  # the exact sign test, one-sided
            count, slower = look.pairs[entry.metric]
            ok &= clopper_pearson(slower, count, pa)[1] < 0.5
            continue
        l_rank = ranks[0][old_n.astype(np.int64)]
        u_rank = ranks[1][new_n.astype(np.int64)]
        o_low = look.order_stat(entry.metric, "old", l_rank)[2]
        n_high = look.order_stat(entry.metric, "new", np.where(u_rank <= new_n, u_rank, 0))[2]
        with np.errstate(invalid="ignore"):
            ok &= (l_rank >= 1) & (u_rank <= new_n) \
                & (n_high <= np.maximum(limit * o_low, o_low + floor))
    return np.asarray(ok)
