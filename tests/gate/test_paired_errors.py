"""The paired error check (`sequential.paired_excess_test`, `checks.error_rate`): valid at
every look by simulation, cross-checked against the wealth multiplied out pair by pair,
and fast where the unpaired check took thousands of requests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import ExchangeRecord
from proxy.gate.checks import error_rate
from proxy.gate.sequential import (
    paired_excess_bound,
    paired_excess_test,
    paired_log_wealth,
    paired_log_wealth_array,
)
from proxy.gate.tally import ErrorPairs
from proxy.gate.verdict import GateCriteria, GateInputs, MatchCounts, evaluate

DELTA = 0.01
RUNS, LOOKS = 2000, 3000


def reference_log_wealth(d: np.ndarray, delta: float, side: str) -> np.ndarray:
    """The mixture wealth after each pair, multiplied out over the sequence (no counts):
    the bets and weights as `sequential` documents them."""
    sign = 1.0 if side == "pass" else -1.0
    fractions = ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] if side == "pass"
                 else [2.0 ** (-k / 2) for k in range(14)])
    lam = np.array(fractions) / (1 - sign * delta)
    weights = np.full(len(fractions), 1 / len(fractions))
    wealth = np.cumprod(1 - sign * lam[:, None] * (d[None, :] - delta), axis=1)
    with np.errstate(divide="ignore"):
        out: np.ndarray = np.log(weights @ wealth)
    return out


def draw_pairs(rng: np.random.Generator, old: float, new: float, correlated: bool,
               shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Errors of old and new per request; correlated: new errs wherever old does, and on
    a further (new - old) / (1 - old) of the rest (so E[new - old] = new - old either way)."""
    old_err = rng.random(shape) < old
    if correlated:
        new_err = old_err | (rng.random(shape) < (new - old) / (1 - old))
    else:
        new_err = rng.random(shape) < new
    return old_err, new_err


def test_the_count_formula_is_the_product_over_the_sequence() -> None:
    rng = np.random.default_rng(3)
    for old, new, correlated in ((0.0, 0.01, False), (0.02, 0.03, True), (0.05, 0.01, False)):
        old_err, new_err = draw_pairs(rng, old, new, correlated, (1, 1500))
        d = new_err[0].astype(float) - old_err[0]
        up, down = np.cumsum(d == 1), np.cumsum(d == -1)
        n = np.arange(1, len(d) + 1)
        for side in ("pass", "fail"):
            expected = reference_log_wealth(d, DELTA, side)
            got = paired_log_wealth_array(n, up, down, DELTA, side)
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
            at = [9, 499, 1499]
            assert [paired_log_wealth(n[i], up[i], down[i], DELTA, side) for i in at] == \
                pytest.approx(expected[at].tolist(), rel=1e-9, abs=1e-9)


def _ever_rejects(old: float, new: float, correlated: bool, side: str, alpha: float,
                  seed: int) -> float:
    """Share of RUNS runs of LOOKS pairs whose test rejects at some look (every pair)."""
    rng = np.random.default_rng(seed)
    old_err, new_err = draw_pairs(rng, old, new, correlated, (RUNS, LOOKS))
    up = np.cumsum(new_err & ~old_err, axis=1)
    down = np.cumsum(old_err & ~new_err, axis=1)
    n = np.arange(1, LOOKS + 1)
    level = math.log(1 / alpha)
    ever = np.zeros(RUNS, bool)
    for lo in range(0, LOOKS, 250):
        part = slice(lo, lo + 250)
        wealth = paired_log_wealth_array(n[None, part], up[:, part], down[:, part], DELTA,
                                         side)  # type: ignore[arg-type]
        ever |= np.any(wealth >= level, axis=1)
    # the scalar test agrees with the array on the last look of a few runs
    for run in range(3):
        test = paired_excess_test(LOOKS, int(up[run, -1]), int(down[run, -1]), DELTA, alpha,
                                  side)  # type: ignore[arg-type]
        assert test.log_wealth == pytest.approx(
            float(paired_log_wealth_array(LOOKS, up[run, -1], down[run, -1], DELTA,
                                          side)))  # type: ignore[arg-type]
    return float(ever.mean())


def _slack(alpha: float) -> float:
    return 3 * math.sqrt(alpha * (1 - alpha) / RUNS) + 1 / RUNS


@pytest.mark.parametrize(("old", "new", "correlated"), [
    (0.0, 0.01, False), (0.02, 0.03, False), (0.02, 0.03, True), (0.05, 0.06, False)])
def test_a_version_exactly_at_the_limit_passes_at_most_alpha_of_the_time(
        old: float, new: float, correlated: bool) -> None:
    alpha = GateCriteria().pass_alpha()
    assert _ever_rejects(old, new, correlated, "pass", alpha, seed=11) <= alpha + _slack(alpha)


@pytest.mark.parametrize(("old", "new", "correlated"), [
    (0.0, 0.01, False), (0.02, 0.03, True), (0.01, 0.01, False)])
def test_a_good_version_fails_at_most_alpha_of_the_time(old: float, new: float,
                                                        correlated: bool) -> None:
    alpha = GateCriteria().fail_alpha()
    assert _ever_rejects(old, new, correlated, "fail", alpha, seed=12) <= alpha + _slack(alpha)


def _records(errors: list[tuple[bool, bool]], deterministic: bool = True,
             ) -> list[ExchangeRecord]:
    def cap(role: Role, failed: bool) -> Capture:
        if failed:
            return Capture(role, role, 500, None, (), None, None, None, "", None,
                           error="http_5xx")
        return Capture(role, role, 200, 0.05, (), 0.2, 20, "length", "", None)

    return [ExchangeRecord(f"r{i}", float(i),
                           RequestMeta("completions", True, deterministic, f"{i:064x}", 100,
                                       None),
                           (cap("primary", old), cap("shadow", new)), ())
            for i, (old, new) in enumerate(errors)]


def _errors_check(records: list[ExchangeRecord]) -> tuple[str, dict[str, object]]:
    verdict = evaluate(GateInputs.from_records(records))
    check = next(c for c in verdict.checks if c.name == "errors")
    return check.status, dict(check.facts)


def test_an_error_free_identical_version_passes_within_450_pairs() -> None:
    status, facts = _errors_check(_records([(False, False)] * 450))
    assert status == "pass"
    assert facts["basis"] == "paired"
    assert facts["pairs"] == {"n": 450, "new_only": 0, "old_only": 0}
    # the first look that passes, through the gate (the error check alone): ln(20) over
    # the even mixture's gain, about 420 pairs
    first = next(n for n in range(300, 451, 10)
                 if _errors_check(_records([(False, False)] * n))[0] == "pass")
    assert 400 <= first <= 430


def test_half_a_percent_of_errors_a_side_passes_near_a_thousand_pairs() -> None:
    """0.5 % errors on each side, never on the same request (the pairs the test must
    outweigh): the pass side's prior is spread where such a version's best bet lies, so it
    passes by 1,050 pairs (the prior before, half its weight on the largest bet, took
    about 1,470) and not long before 1,000 (ln(20) over the best constant bet's gain,
    0.0038 a pair, is 787: no fixed mixture reaches it)."""
    def errors(n: int) -> list[tuple[bool, bool]]:  # 5 a side, all within the first 950
        return [(i < 950 and i % 190 == 95, i < 950 and i % 190 == 0) for i in range(n)]
    assert _errors_check(_records(errors(1050)))[0] == "pass"
    assert _errors_check(_records(errors(950)))[0] == "inconclusive"


def test_sampled_requests_pair_for_errors_too() -> None:
    inputs = GateInputs.from_records(_records([(False, True), (False, False)], False))
    assert inputs.error_pairs == ErrorPairs(2, 1, 0)


def test_three_percent_more_errors_fails_fast() -> None:
    rng = np.random.default_rng(5)
    c = GateCriteria()
    decided = []
    for _ in range(20):
        old_err, new_err = draw_pairs(rng, 0.005, 0.035, False, (1, 3000))
        up = np.cumsum(new_err[0] & ~old_err[0])
        down = np.cumsum(old_err[0] & ~new_err[0])
        at = next((n for n in range(100, 3001, 100)
                   if paired_excess_test(n, up[n - 1], down[n - 1], DELTA, c.fail_alpha(),
                                         "fail").rejects), None)
        decided.append(at)
    assert all(n is not None for n in decided)
    assert float(np.median([n for n in decided if n is not None])) <= 2000
    # and the gate says so, with the pair counts
    errors = [(bool(o), bool(w)) for o, w in zip(old_err[0], new_err[0], strict=True)]
    status, facts = _errors_check(_records(errors))
    assert status == "fail" and facts["basis"] == "paired"


def test_without_pairs_the_check_is_the_unpaired_one() -> None:
    c = GateCriteria()
    base = GateInputs(MatchCounts(3000), requests={"primary": 3000, "shadow": 3000},
                      errors={"primary": 3, "shadow": 4})
    unpaired = error_rate(base, c)
    assert unpaired.facts["basis"] == "unpaired"
    assert "bounds" in unpaired.facts and "pairs" not in unpaired.facts
    empty = error_rate(GateInputs(MatchCounts(3000), requests=base.requests,
                                  errors=base.errors, error_pairs=ErrorPairs()), c)
    assert (empty.status, empty.reason, dict(empty.facts)) == \
        (unpaired.status, unpaired.reason, dict(unpaired.facts))
    paired = error_rate(GateInputs(MatchCounts(3000), requests=base.requests,
                                   errors=base.errors, error_pairs=ErrorPairs(3000, 4, 3)), c)
    assert paired.facts["basis"] == "paired" and "paired, 3000 pairs" in paired.reason


def test_the_bounds_invert_the_test() -> None:
    alpha = 0.05
    for n, up, down in ((400, 0, 0), (2000, 30, 10), (1000, 5, 5)):
        high = paired_excess_bound(n, up, down, alpha, "pass")
        assert paired_excess_test(n, up, down, min(high + 1e-6, 0.99), alpha, "pass").rejects
        assert not paired_excess_test(n, up, down, max(high - 1e-3, 0), alpha,
                                      "pass").rejects or high - 1e-3 < 0
        low = paired_excess_bound(n, up, down, alpha, "fail")
        assert low <= (up - down) / n <= high


def test_bad_counts_are_refused_with_their_values() -> None:
    with pytest.raises(ValueError, match="new_only=5"):
        paired_excess_test(3, 5, 0, DELTA, 0.05, "pass")
    with pytest.raises(ValueError, match="1.5"):
        paired_log_wealth(3, 0, 0, 1.5, "pass")
    with pytest.raises(ValueError, match="4"):
        ErrorPairs(3, 4, 0)
