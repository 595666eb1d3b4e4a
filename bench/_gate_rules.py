"""Both gates of `gate_calibration.py`, vectorized over runs: the new (anytime-valid) one
from the gate's own functions and thresholds, and a copy of the rule before it (Wilson
intervals, point percentile ratios, Mann-Whitney) as the reference.

Statuses are arrays of 0 fail, 1 inconclusive, 2 pass per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from proxy.compare.gate import GateCriteria
from proxy.compare.sequential import mean_bounds_array, quantile_rank_table

Array = NDArray[np.float64]
FAIL, INCONCLUSIVE, PASS = 0, 1, 2
LATENCY = (("ttft", 0.5, "max_ttft_p50_ratio"), ("ttft", 0.99, "max_ttft_p99_ratio"),
           ("tpot", 0.5, "max_tpot_p50_ratio"), ("tpot", 0.99, "max_tpot_p99_ratio"))
_Z95 = NormalDist().inv_cdf(0.975)


def status(passed: NDArray[np.bool_], failed: NDArray[np.bool_]) -> NDArray[np.int64]:
    return np.where(failed, FAIL, np.where(passed, PASS, INCONCLUSIVE))


@dataclass
class Look:
    """What one look sees, per run: n samples a role, counts and order statistics."""

    n: int
    new_matched: Array
    base_matched: Array
    new_errors: Array
    old_errors: Array
    sign_sum: Array  # sum of sign(new length - old length) over pairs in arrival order
    # (metric, quantile, role, side) -> lower, upper (NaN: none); side "pass" / "fail"
    bounds: dict[tuple[str, float, str, str], tuple[Array, Array]]
    points: dict[tuple[str, float, str], Array]  # numpy-interpolated percentile
    mann_whitney: dict[str, tuple[Array, Array]]  # p (new greater / two-sided), effect


def new_rank_needs(criteria: GateCriteria, size: int) -> dict[tuple[float, str], tuple[
        NDArray[np.int64], NDArray[np.int64]]]:
    """Rank tables per (quantile, side): "pass" at pass_alpha / 2, "fail" at fail_alpha / 2
    (`latency_checks._ratio_check`: each side's alpha halved between old's and new's bound)."""
    sides = {"pass": criteria.pass_alpha() / 2, "fail": criteria.fail_alpha() / 2}
    return {(q, side): quantile_rank_table(size, q, alpha)
            for q in (0.5, 0.99) for side, alpha in sides.items()}


def _rate_bounds(rows: Array, n: int, alpha: float) -> tuple[Array, Array]:
    return mean_bounds_array(rows, float(n), alpha, steps=30)


def new_gate(look: Look, c: GateCriteria) -> NDArray[np.int64]:
    """The anytime-valid gate's verdict (streamed traffic, a baseline, lengths known): pass
    sides at `pass_alpha` (an intersection-union test), fail sides at `fail_alpha`."""
    n = look.n
    pass_alpha, fail_alpha = c.pass_alpha(), c.fail_alpha()
    rates = np.stack([look.new_matched, look.base_matched, look.new_errors, look.old_errors])
    p_low, p_high = _rate_bounds(rates, n, pass_alpha / 2)
    f_low, f_high = _rate_bounds(rates, n, fail_alpha / 2)
    m = c.max_excess_divergence
    checks = [status(p_low[0] >= p_high[1] - m, f_high[0] < f_low[1] - m),
              status(p_high[2] <= p_low[3] + c.max_error_rate_excess,
                     f_low[2] > f_high[3] + c.max_error_rate_excess)]
    shift = c.max_length_shift
    assert shift is not None
    signs = (look.sign_sum + n) / 2
    s_low, s_high = (2 * b - 1 for b in _rate_bounds(signs, n, pass_alpha))
    sf_low, sf_high = (2 * b - 1 for b in _rate_bounds(signs, n, fail_alpha))
    checks.append(status((s_low >= -shift) & (s_high <= shift),
                         (sf_low > shift) | (sf_high < -shift)))
    for metric, q, field in LATENCY:
        limit = getattr(c, field)
        floor = c.token_latency_floor_s if metric == "tpot" else c.latency_floor_s
        o_low = look.bounds[(metric, q, "old", "pass")][0]
        o_high = look.bounds[(metric, q, "old", "fail")][1]
        n_low = look.bounds[(metric, q, "new", "fail")][0]
        n_high = look.bounds[(metric, q, "new", "pass")][1]
        with np.errstate(invalid="ignore"):
            passed = n_high <= np.maximum(limit * o_low, o_low + floor)
            failed = n_low > np.maximum(limit * o_high, o_high + floor)
        checks.append(status(passed & ~np.isnan(n_high) & ~np.isnan(o_low),
                             failed & ~np.isnan(n_low) & ~np.isnan(o_high)))
    verdict = np.min(np.stack(checks), axis=0)
    return np.where(n >= c.min_samples, verdict, np.minimum(verdict, INCONCLUSIVE))


def wilson(k: Array, n: int) -> tuple[Array, Array]:
    p = k / n
    z2n = _Z95 * _Z95 / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = _Z95 * np.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    return np.maximum(0, centre - half), np.minimum(1, centre + half)


def todays_gate(look: Look, c: GateCriteria) -> NDArray[np.int64]:
    """The rule before: a copy kept here as the reference (min_effect_size 0.1, alpha 0.05)."""
    n = look.n
    low, high = wilson(look.new_matched, n)
    threshold = np.maximum(0, look.base_matched / n - c.max_excess_divergence)
    checks = [status(low >= threshold, high < threshold)]
    limit = look.old_errors / n + c.max_error_rate_excess
    e_low, _ = wilson(look.new_errors, n)
    checks.append(status(look.new_errors / n <= limit, e_low > limit))
    if n >= c.min_latency_samples:
        p_len, effect_len = look.mann_whitney["lengths"]
        checks.append(status(np.ones(p_len.shape, bool),
                             (np.abs(effect_len) > 0.3) & (p_len < 0.05)))
        for metric, q, field in LATENCY:
            ratio = look.points[(metric, q, "new")] / look.points[(metric, q, "old")]
            p, effect = look.mann_whitney[metric]
            over = ratio > getattr(c, field)
            checks.append(status(~over, over & (p < 0.05) & (effect >= 0.1)))
    else:
        checks.append(np.full(look.new_matched.shape, INCONCLUSIVE))
    verdict = np.min(np.stack(checks), axis=0)
    return np.where(n >= c.min_samples, verdict, np.minimum(verdict, INCONCLUSIVE))


def mann_whitney_p(u: Array, n: int, two_sided: bool) -> tuple[Array, Array]:
    """Normal approximation with continuity correction (scipy's for large samples)."""
    mean, sd = n * n / 2, np.sqrt(n * n * (2 * n + 1) / 12)
    effect = 2 * u / (n * n) - 1
    if two_sided:
        z = (np.abs(u - mean) - 0.5) / sd
        p = 2 * (1 - _phi(z))
    else:
        p = 1 - _phi((u - mean - 0.5) / sd)
    return np.minimum(p, 1.0), effect


def _phi(z: Array) -> Array:
    from scipy.special import ndtr

    return np.asarray(ndtr(z))
