"""Confidence sequences: checked against `savvi` (Lindon's Dirichlet-multinomial e-process,
an independent implementation of the same mixture) and by Monte-Carlo coverage over
every look of many simulated streams."""

from __future__ import annotations

import numpy as np
import pytest
import savvi.multinomial  # dev dependency (pyproject: dev extra)

from proxy.gate.sequential import (
    mean_bounds,
    mean_bounds_array,
    quantile_bounds,
    quantile_prior,
    quantile_rank_table,
    quantile_ranks,
)


@pytest.mark.parametrize(("successes", "n"), [(0, 20), (20, 20), (17, 20), (93, 100),
                                              (480, 1000), (3, 250)])
def test_mean_bounds_equal_savvis_interval_for_the_same_prior(successes: int, n: int) -> None:
    alpha = 0.01
    # savvi's interval: a fixed Dirichlet(k theta_0) prior; k=1, theta_0=(1/2, 1/2) is Jeffreys'.
    model = savvi.multinomial.Multinomial(alpha, np.array([0.5, 0.5]), k=1.0)
    model.update(np.array([successes, n - successes]))
    reference = model.calculate_conf_int()[0]
    low, high = mean_bounds(successes, n, alpha)
    assert low == pytest.approx(reference[0], abs=2e-4)
    assert high == pytest.approx(reference[1], abs=2e-4)


@pytest.mark.parametrize("p", [0.5, 0.99])
def test_quantile_rank_table_accepts_exactly_the_counts_savvis_test_does_not_reject(
        p: float) -> None:
    alpha = 0.002
    a, b = quantile_prior(p)
    low, high = quantile_rank_table(3000, p, alpha)
    for n in (40, 200, 1000, 3000):
        for s in {int(low[n]) - 1, int(low[n]), int(high[n]), int(high[n]) + 1}:
            if not 0 <= s <= n:
                continue
            model = savvi.multinomial.Multinomial(alpha, np.array([p, 1 - p]), k=a + b)
            model.update(np.array([s, n - s]))
            accepted = model.odds < 1 / alpha
            assert accepted == (low[n] <= s <= high[n]), (n, s, model.odds)


def test_mean_bounds_array_matches_the_scalar_version() -> None:
    totals = np.array([0.0, 5.0, 37.0, 100.0, 0.0])
    ns = np.array([100.0, 100.0, 40.0, 100.0, 0.0])
    low, high = mean_bounds_array(totals, ns, 0.005)
    for i in range(len(ns)):
        ref = mean_bounds(totals[i], int(ns[i]), 0.005)
        assert low[i] == pytest.approx(ref[0], abs=1e-9)
        assert high[i] == pytest.approx(ref[1], abs=1e-9)


def test_mean_sequence_covers_the_mean_at_every_look_of_most_streams() -> None:
    """Time-uniform: the share of streams whose bounds ever exclude the mean is <= alpha
    (a fixed-sample interval looked at every sample exceeds it several times over)."""
    rng = np.random.default_rng(7)
    alpha, runs, horizon, p = 0.1, 2000, 600, 0.3
    draws = rng.random((runs, horizon)) < p
    sums = np.cumsum(draws, axis=1)
    missed = np.zeros(runs, dtype=bool)
    for t in range(5, horizon + 1, 5):
        low, high = mean_bounds_array(sums[:, t - 1].astype(float), float(t), alpha)
        missed |= (low > p) | (high < p)
    assert missed.mean() <= alpha
    assert missed.mean() > 0.0  # not vacuous: some streams do come close


def test_quantile_sequence_covers_p99_and_p50_at_every_look() -> None:
    rng = np.random.default_rng(11)
    alpha, runs, horizon = 0.1, 600, 3000
    x = rng.lognormal(0.0, 0.5, (runs, horizon))
    for p in (0.5, 0.99):
        truth = float(np.exp(0.5 * _z(p)))
        low_rank, high_rank = quantile_rank_table(horizon, p, alpha)
        below = np.cumsum(x <= truth, axis=1)  # #{x_i <= q}: in the accepted counts?
        t = np.arange(1, horizon + 1)
        missed = ((below < low_rank[t]) | (below > high_rank[t])).any(axis=1)
        assert missed.mean() <= alpha, p


def test_quantile_bounds_are_order_statistics_and_none_before_the_sample_allows() -> None:
    ordered = [float(i) for i in range(1, 101)]
    lower, upper = quantile_bounds(ordered, 0.99, 0.01)
    assert lower is not None and upper is None  # 100 samples cannot bound a p99 from above
    low_count, high_count = quantile_ranks(100, 0.5, 0.01)
    lower, upper = quantile_bounds(ordered, 0.5, 0.01)
    assert (lower, upper) == (float(low_count), float(high_count + 1))
    assert lower < 50 < upper


def test_bad_arguments_are_refused_with_the_value_quoted() -> None:
    with pytest.raises(ValueError, match="alpha must be within"):
        mean_bounds(1, 2, 1.5)
    with pytest.raises(ValueError, match="total=3"):
        mean_bounds(3, 2, 0.05)
    with pytest.raises(ValueError, match="p=1.0"):
        quantile_rank_table(10, 1.0, 0.05)


def _z(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)
