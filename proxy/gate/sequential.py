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
  Beta(c p, c (1 - p)) is centred on p and tuned for power, never for validity;
- `paired_excess_test`: a betting test on pairs D_i = err_new_i - err_old_i in {-1, 0, 1}
  (both versions answered request i): for H0 E[D] >= delta the wealth
  W(lam) = prod_i (1 - lam (D_i - delta)), lam in [0, 1/(1 - delta)], has factors >= 0
  with mean <= 1 under H0 (for the fail side's H0' E[D] <= delta, prod (1 + lam (D_i -
  delta)), lam in [0, 1/(1 + delta)]); a mixture over lam with weights fixed in advance
  is again a test supermartingale, so by Ville "reject when it reaches 1/alpha" errs with
  probability <= alpha over every look. The product is order-free: it depends only on
  the counts of pairs, new-only and old-only errors;
- `tail_log_evidence`: a weighted mean of three families of betting tests at one
  threshold (the paired p99 check of `proxy.gate.latency_checks`): on the pairs, on new's
  rate over it and on old's rate over it, each order-free (counts only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "TAIL_BETS",
    "TAIL_TILTS",
    "TAIL_WEIGHTS",
    "PairedTest",
    "Side",
    "mean_bounds",
    "mean_bounds_array",
    "paired_excess_bound",
    "paired_excess_test",
    "paired_log_wealth",
    "paired_log_wealth_array",
    "quantile_bounds",
    "quantile_prior",
    "quantile_rank_table",
    "quantile_ranks",
    "tail_log_evidence",
    "tail_log_parts",
]

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


def _bisect(inside: Callable[[float], bool], outside_p: float, inside_p: float,
            steps: int = _BISECT_STEPS) -> float:
    """The boundary between an excluded p and an accepted one (the set is an interval)."""
    out, inn = outside_p, inside_p
    for _ in range(steps):
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


Side = Literal["pass", "fail"]
# The paired test's bets, as fractions of lam_max = 1/(1 -+ delta) (the largest bet with
# factors >= 0), even weights, fixed here before any data. Pass side: 0.1, 0.2, ..., 1.0.
# Where a version is close to old the test's work is to outweigh a handful of discordant
# errors among ~1,000 pairs, whose best bet lies between lam_max / 2 and lam_max (0.625
# lam_max at 0.5 % errors a side, independent); what the spread gives up is the error-free
# case, which a prior heavy on lam_max passes sooner. Fail side: lam_max * 2^(-k/2),
# k = 0..13, even weights (an excess of a few percent and one of 30 % must both be
# caught). What each costs in pairs: docs/GATE.md, "errors".
PAIRED_BETS = 14
_SCALES: dict[Side, NDArray[np.float64]] = {
    "pass": np.arange(1, 11) / 10,
    "fail": 2.0 ** (-np.arange(PAIRED_BETS) / 2),
}


@dataclass(frozen=True)
class PairedTest:
    """One side of the paired error test at one look: whether it rejects (log wealth at or
    past ln(1/alpha))."""

    rejects: bool
    log_wealth: float
    threshold: float  # ln(1/alpha)


def _times_log(count: NDArray[np.float64], log_factor: NDArray[np.float64],
               ) -> NDArray[np.float64]:
    """count * log_factor with 0 * -inf = 0 (a bet that lost everything on a kind of pair
    that has not occurred)."""
    with np.errstate(invalid="ignore"):
        out: NDArray[np.float64] = np.where(count > 0, count * log_factor, 0.0)
    return out


def paired_log_wealth_array(n: NDArray[np.float64] | float,
                            new_only: NDArray[np.float64] | float,
                            old_only: NDArray[np.float64] | float, delta: float,
                            side: Side) -> NDArray[np.float64]:
    """log of the mixture wealth after n pairs (`new_only`: new errored, old did not;
    `old_only`: the reverse), elementwise over arrays; counts may be fractional (the
    projection of more samples scales them)."""
    if not -1 < delta <= 1:
        raise ValueError(f"delta must be within (-1, 1], got {delta!r}")
    if side not in _SCALES:
        raise ValueError(f"side must be 'pass' or 'fail', got {side!r}")
    shape = np.broadcast(np.asarray(n), np.asarray(new_only), np.asarray(old_only)).shape
    total, up, down = (np.broadcast_to(np.asarray(v, dtype=float), shape)[..., None]
                       for v in (n, new_only, old_only))
    sign = 1.0 if side == "pass" else -1.0  # pass: 1 - lam (D - delta); fail: 1 + lam (...)
    # delta 1 on the pass side: any bet is safe (a new-only error costs nothing), and the
    # first pair that is not new-only decides
    lam = _SCALES[side] / max(1 - sign * delta, 1e-12)
    with np.errstate(divide="ignore"):
        log_up = np.log1p(np.maximum(-sign * lam * (1 - delta), -1.0))
        log_down = np.log1p(np.maximum(sign * lam * (1 + delta), -1.0))
        log_same = np.log1p(sign * lam * delta)
    terms = (-math.log(len(lam)) + _times_log(up, log_up) + _times_log(down, log_down)
             + _times_log(total - up - down, log_same))
    top = np.max(terms, axis=-1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out: NDArray[np.float64] = safe + np.log(np.sum(np.exp(terms - safe[..., None]),
                                                        axis=-1))
    return out


def paired_log_wealth(n: float, new_only: float, old_only: float, delta: float,
                      side: Side) -> float:
    """`paired_log_wealth_array` for one set of counts."""
    return float(paired_log_wealth_array(n, new_only, old_only, delta, side))


def paired_excess_test(n: float, new_only: float, old_only: float, delta: float,
                       alpha: float, side: Side) -> PairedTest:
    """The paired error test on counts: side "pass" rejects E[err_new - err_old] >= delta
    (new is not worse than old by delta or more), side "fail" rejects E[...] <= delta; each
    wrong with probability <= alpha over every look."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within (0, 1), got {alpha!r}")
    if not 0 <= new_only + old_only <= n or new_only < 0 or old_only < 0:
        raise ValueError(f"need 0 <= new_only + old_only <= n, got new_only={new_only!r}, "
                         f"old_only={old_only!r}, n={n!r}")
    log_wealth = paired_log_wealth(n, new_only, old_only, delta, side)
    threshold = math.log(1 / alpha)
    return PairedTest(log_wealth >= threshold, log_wealth, threshold)


def paired_excess_bound(n: float, new_only: float, old_only: float, alpha: float,
                        side: Side) -> float:
    """The test inverted (a confidence sequence for E[err_new - err_old]): side "pass" the
    smallest delta the pass side rejects E[D] >= delta at (an upper bound), "fail" the
    largest delta the fail side rejects E[D] <= delta at (a lower bound). Rejection is
    monotone in delta on both sides (with the bets scaled by lam_max every factor is)."""
    level = math.log(1 / alpha)

    def rejects(delta: float) -> bool:
        return paired_log_wealth(n, new_only, old_only, delta, side) >= level

    edge = 1 - 1e-9
    if side == "pass":
        outside, inside = -edge, edge  # outside: not rejected
        if rejects(outside):
            return -1.0
        if not rejects(inside):
            return 1.0
    else:
        outside, inside = edge, -edge
        if rejects(outside):
            return 1.0
        if not rejects(inside):
            return -1.0
    return _bisect(rejects, outside, inside, _BISECT_STEPS // 2)



# The tail evidence's bets (`tail_log_evidence`), fixed before any data. At one threshold
# the hypothesis is P(new over) >= tail >= P(old over), a polytope of the joint law of the
# pair (x, y) = (new over, old over); every e-variable for it is a factor
# 1 + a (tail - x) + b (y - tail), a, b >= 0. Three families of such bets, mixed with
# TAIL_WEIGHTS:
# - paired: b = k a, k in TAIL_TILTS, a = s / (1 - tail + k tail) (s in TAIL_BETS, the
#   fraction of the largest safe bet). k = 1 is the sign test on pairs where x and y
#   differ (1 + a (y - x)); k = 1/2 also gains on the pairs where neither is over and
#   loses on those where both are, which is where the hardest thresholds' best bet lies
#   (just above new's p99: a near its largest, b about a / 2 with per-request structure or
#   iid noise alike);
# - new's rate (b = 0): fractions of 1 / (1 - tail), for thresholds far above new's p99;
# - old's rate (a = 0): fractions of 1 / tail, for thresholds far below it.
# The weights put most on the paired bets: the check waits for its hardest threshold,
# where they are the best; the thresholds the rates explain have evidence to spare. Against
# the even mean of a paired sign test and the two rates (the design before), at the
# expected counts: per-request structure (log ratio sigma 0.2) 1,200 -> 850 pairs to pass an
# identical version, 1,600 -> 1,150 one 5 % slower; iid lognormal sigma 0.5 1,675 -> 1,425;
# iid sigma 0.15 550 -> 600. (`bench/gate_p99_pairs.py` and `bench/gate_calibration.py`
# measure the medians.)
TAIL_WEIGHTS = np.array([0.7, 0.2, 0.1])
TAIL_TILTS = np.array([0.5, 1.0])
TAIL_BETS = np.array([0.3, 0.5, 0.65, 0.78, 0.88, 0.95])
_BELOW_BETS = np.array([0.2, 0.4, 0.6, 0.8, 0.95])
_ABOVE_BETS = np.array([0.0025, 0.005, 0.01, 0.02, 0.04, 0.08])


def _log_mean(terms: NDArray[np.float64]) -> NDArray[np.float64]:
    top = np.max(terms, axis=-1)
    out: NDArray[np.float64] = top + np.log(np.mean(np.exp(terms - top[..., None]), axis=-1))
    return out


def tail_log_parts(n: NDArray[np.float64] | float, new_over: NDArray[np.float64] | float,
                   old_over: NDArray[np.float64] | float, gain: NDArray[np.float64] | float,
                   loss: NDArray[np.float64] | float, tail: float = 0.01,
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The log wealth of each of `tail_log_evidence`'s three families, each its bets'
    even mixture: (paired, new's rate, old's rate)."""
    if not 0 < tail < 1:
        raise ValueError(f"tail must be within (0, 1), got {tail!r}")

    def col(v: NDArray[np.float64] | float) -> NDArray[np.float64]:
        return np.asarray(v, dtype=float)[..., None]

    total, x, y, up, down = col(n), col(new_over), col(old_over), col(gain), col(loss)
    both = np.maximum(x - down, 0.0)  # new over and old over
    neither = np.maximum(total - x - up, 0.0)
    tilt = np.repeat(TAIL_TILTS, len(TAIL_BETS))
    bet = np.tile(TAIL_BETS, len(TAIL_TILTS)) / (1 - tail + tilt * tail)
    below = _BELOW_BETS / (1 - tail)
    above = _ABOVE_BETS / tail
    with np.errstate(divide="ignore"):
        paired = _log_mean(_times_log(neither, np.log1p(bet * tail * (1 - tilt)))
                           + _times_log(down, np.log1p(-bet * (1 - tail + tilt * tail)))
                           + _times_log(up, np.log1p(bet * (tail + tilt * (1 - tail))))
                           + _times_log(both, np.log1p(-bet * (1 - tail) * (1 - tilt))))
        new_rate = _log_mean(_times_log(total - x, np.log1p(below * tail))
                             + _times_log(x, np.log1p(-below * (1 - tail))))
        old_rate = _log_mean(_times_log(total - y, np.log1p(-above * tail))
                             + _times_log(y, np.log1p(above * (1 - tail))))
    return paired, new_rate, old_rate


def tail_log_evidence(n: NDArray[np.float64] | float, new_over: NDArray[np.float64] | float,
                      old_over: NDArray[np.float64] | float, gain: NDArray[np.float64] | float,
                      loss: NDArray[np.float64] | float, tail: float = 0.01,
                      ) -> NDArray[np.float64]:
    """log of the TAIL_WEIGHTS-weighted mean of three betting e-processes on n requests at
    one threshold, elementwise; each is a test supermartingale where, for every request,
    P(new over) >= `tail` >= P(old over) (the paired p99 check's null at the right
    threshold), so their mean reaches 1/alpha with probability <= alpha over every look
    (Ville). With x_i = new over (`new_over` of n), y_i = old over (`old_over` of n):
    - paired: prod (1 + a ((tail - x_i) + k (y_i - tail))), mixed over (a, k) (see
      TAIL_TILTS): `gain` counts the requests with y and not x, `loss` x and not y;
    - new's rate: prod (1 + lam (tail - x_i));
    - old's rate: prod (1 + lam (y_i - tail)).
    Counts may be fractional (projections scale them)."""
    parts = np.stack(tail_log_parts(n, new_over, old_over, gain, loss, tail), axis=-1)
    return _log_mean(parts + np.log(TAIL_WEIGHTS * len(TAIL_WEIGHTS)))
