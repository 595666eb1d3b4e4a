from __future__ import annotations

import random
from dataclasses import replace
from itertools import product

import pytest

from proxy.capture.types import Capture
from proxy.gate.stats import (
    LatencySamples,
    LatencySummary,
    mann_whitney,
    percentile,
    ratio,
    tpot_s,
    tpot_unstreamed_s,
    wilson_interval,
)


def test_percentile_matches_numpy_linear_rule() -> None:
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([7.0], 99) == 7.0 and percentile([], 50) is None
    values = list(range(1, 101))
    assert percentile(values, 99) == pytest.approx(99.01)
    with pytest.raises(ValueError, match="101"):
        percentile(values, 101)


def test_summary() -> None:
    summary = LatencySummary.of([0.3, 0.1, 0.2])
    assert (summary.n, summary.p50_s) == (3, 0.2)
    assert summary.mean_s == pytest.approx(0.2)
    assert LatencySummary.of([]) == LatencySummary(0, None, None, None, None)


def test_mann_whitney_known_textbook_values() -> None:
    # scipy.stats.mannwhitneyu documentation example: U = 17, exact two-sided p = 0.1111
    males = [19, 22, 16, 29, 24]
    females = [20, 11, 17, 12]
    result = mann_whitney(old=females, new=males)
    assert result is not None
    assert result.u_new == 17.0
    assert result.p_value == pytest.approx(0.1111, abs=1e-4)
    assert (result.n_old, result.n_new) == (4, 5)
    cliff = sum((m > f) - (m < f) for m, f in product(males, females)) / 20
    assert result.effect_size == pytest.approx(cliff) == pytest.approx(0.7)


def test_mann_whitney_one_sided_detects_slower_new() -> None:
    rng = random.Random(7)
    old = [rng.gauss(0.100, 0.01) for _ in range(300)]
    slower = [rng.gauss(0.110, 0.01) for _ in range(300)]
    same = [rng.gauss(0.100, 0.01) for _ in range(300)]
    hit = mann_whitney(old, slower, alternative="greater")
    miss = mann_whitney(old, same, alternative="greater")
    assert hit is not None and miss is not None
    assert hit.p_value < 1e-10 and hit.effect_size > 0.4
    assert miss.p_value > 0.01 and abs(miss.effect_size) < 0.15
    assert mann_whitney([], [1.0]) is None


def test_mann_whitney_all_ties_and_thinning() -> None:
    result = mann_whitney([1.0] * 10, [1.0] * 10)
    assert result is not None and result.p_value == 1.0 and result.effect_size == 0.0
    thinned = mann_whitney(list(range(1000)), [x + 0.5 for x in range(1000)], max_samples=100)
    assert thinned is not None and (thinned.n_old, thinned.n_new) == (100, 100)


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(8, 10)
    assert (low, high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    low, high = wilson_interval(100, 100)
    assert high == 1.0 and low == pytest.approx(0.9630, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 50)[0] == 0.0
    narrow, wide = wilson_interval(80, 100, 0.90), wilson_interval(80, 100, 0.99)
    assert wide[0] < narrow[0] < 0.8 < narrow[1] < wide[1]
    with pytest.raises(ValueError, match="successes=11"):
        wilson_interval(11, 10)


def test_wilson_agrees_with_scipy() -> None:
    from scipy.stats import binomtest

    for k, n in [(3, 7), (45, 50), (999, 1000)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == (pytest.approx(ci.low), pytest.approx(ci.high))


def _cap(**kw: object) -> Capture:
    base = Capture(role="shadow", backend="new", status=200, ttft_s=0.1, itl_s=(0.02, 0.03),
                   e2e_s=0.15, output_tokens=3, finish_reason="stop", text="", token_ids=None)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_tpot_and_samples_from_captures_skip_failures() -> None:
    assert tpot_s(_cap()) == pytest.approx(0.025)
    assert tpot_s(_cap(output_tokens=1)) is None
    samples = LatencySamples.from_captures([
        _cap(), _cap(ttft_s=0.2, e2e_s=0.4, itl_s=(0.1,), output_tokens=2),
        _cap(error="timeout"), _cap(cancelled=True), _cap(status=500), _cap(status=None),
    ])
    assert samples.ttft_s == (0.1, 0.2) and samples.itl_s == (0.02, 0.03, 0.1)
    assert samples.tpot_s == (pytest.approx(0.025), pytest.approx(0.2))
    assert samples.e2e_s == (0.15, 0.4) and samples.output_tokens == (3, 2)
    assert samples.summaries()["ttft"].n == 2
    with pytest.raises(ValueError, match="'nope'"):
        samples.metric("nope")


def test_unstreamed_captures_give_their_own_samples() -> None:
    """E2E and E2E over completion tokens, apart from the streamed samples; failures, no
    token at all and no E2E give nothing."""
    assert tpot_unstreamed_s(_cap(e2e_s=0.6, output_tokens=3)) == pytest.approx(0.2)
    assert tpot_unstreamed_s(_cap(output_tokens=0)) is None
    assert tpot_unstreamed_s(_cap(output_tokens=None)) is None
    assert tpot_unstreamed_s(_cap(e2e_s=None)) is None
    samples = LatencySamples.from_captures(
        [_cap()],
        [_cap(ttft_s=None, itl_s=(), e2e_s=0.6, output_tokens=3),
         _cap(ttft_s=0.9, itl_s=(), e2e_s=0.9, output_tokens=0),  # TTFT of a body: ignored
         _cap(e2e_s=0.5, status=503), _cap(e2e_s=0.5, cancelled=True)])
    assert samples.ttft_s == (0.1,) and samples.e2e_s == (0.15,) and samples.itl_s == (0.02, 0.03)
    assert samples.e2e_unstreamed_s == (0.6, 0.9)
    assert samples.tpot_unstreamed_s == (pytest.approx(0.2),)
    assert samples.output_tokens == (3, 3, 0)
    assert samples.metric("tpot_unstreamed") == samples.tpot_unstreamed_s
    assert samples.summaries()["e2e_unstreamed"].n == 2


def test_ratio() -> None:
    assert ratio(2.0, 1.0) == 2.0 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None
