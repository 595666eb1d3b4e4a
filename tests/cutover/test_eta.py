from __future__ import annotations

from proxy.cutover.eta import ends_early, estimate, evidence_floor, hopeless_since, rate_per_s
from proxy.gate.checks import Check, Need, Status


def _check(name: str, status: Status = "inconclusive", more: int | None = 0) -> Check:
    return Check(name, status, "", need=Need(more))


def test_binding_check_is_the_one_needing_most_samples() -> None:
    e = estimate([_check("TTFT p50", more=100), _check("TTFT p99", more=1728),
                  _check("match rate", "pass", None)], rate_per_s=4.8, timeout_left_s=1800)
    assert e.check == "TTFT p99" and e.more_samples == 1728
    assert e.line() == "waiting for TTFT p99: about 6 min at 4.8 req/s"
    assert not e.too_slow


def test_too_slow_for_the_timeout_left() -> None:
    e = estimate([_check("TTFT p99", more=3300)], rate_per_s=5.0, timeout_left_s=60)
    assert e.too_slow and e.line().endswith("more than the analysis timeout left")


def test_undecidable_binds_and_says_so() -> None:
    e = estimate([_check("TPOT p50", more=10), _check("TTFT p99", more=None)], 5.0, 600,
                 samples=400)
    assert e.check == "TTFT p99" and e.too_slow
    assert "not decidable within 64x the samples" in e.line()


def test_before_the_first_comparison_nothing_is_called_undecidable() -> None:
    """At 0 samples every check lacks an estimate: that is no evidence, not a hopeless one
    (the walkthrough's first status lines said "not decidable" at "samples 0/50")."""
    e = estimate([_check("match rate", more=None)], 0.0, 1800, samples=0)
    assert not e.too_slow and not e.hopeless
    assert e.line() == "waiting for match rate: no estimate yet (too few samples)"


def test_no_traffic_and_all_decided() -> None:
    e = estimate([_check("TTFT p99", more=50)], rate_per_s=0.0, timeout_left_s=600)
    assert e.seconds_left is None and "no traffic yet" in e.line()
    assert estimate([_check("x", "pass")], 1.0, 10).line() == "every check decided"


def test_rate_per_s() -> None:
    assert rate_per_s(100, 10.0, 148, 20.0) == 4.8
    assert rate_per_s(100, 10.0, 100, 20.0) == 0.0
    assert rate_per_s(100, 10.0, 120, 10.0) == 0.0


def _named(field: str, more: int | None) -> Check:
    return Check(field, "inconclusive", "", need=Need(more))


def test_evidence_floor_is_two_thousand_and_fifty_beyond_a_tail_quantile() -> None:
    assert evidence_floor("max_ttft_p99_ratio") == 5000
    assert evidence_floor("max_tpot_p50_ratio") == 2000
    assert evidence_floor("match_rate") == 2000


def test_hopeless_needs_evidence_and_more_than_four_times_the_time_left() -> None:
    p99 = [_named("max_ttft_p99_ratio", None)]
    assert not estimate(p99, 5.0, 1000, samples=4999).hopeless
    e = estimate(p99, 5.0, 1000, samples=5000)
    assert e.hopeless_reason == ("TTFT p99 is not decidable within 64x the 5000 samples at "
                                 "the current rates")
    # 10,000 more at 5 req/s is 2,000 s: hopeless with 499 s left, not with 500 s.
    rate = [_named("match_rate", 10000)]
    assert estimate(rate, 5.0, 499, samples=2000).hopeless
    assert not estimate(rate, 5.0, 500, samples=2000).hopeless
    assert not estimate(rate, 0.0, 10, samples=5000).hopeless  # no traffic: no projection
    # Needing fewer than it has is within the projection's error, however close the end.
    assert not estimate(rate, 5.0, 10, samples=10001).hopeless
    # A latency need is not projected in time (judged on a window of the newest requests).
    assert not estimate([_named("max_ttft_p99_ratio", 10**7)], 5.0, 10, samples=9000).hopeless


def test_any_hopeless_check_counts_not_only_the_binding_one() -> None:
    e = estimate([_named("max_ttft_p99_ratio", None), _named("errors", 9000)], 1.0, 600,
                 samples=2500)
    assert e.check == "TTFT p99"  # binds, but on too little evidence to end on
    assert e.hopeless_reason is not None and e.hopeless_reason.startswith("error rate needs")


def test_a_streak_of_hopeless_looks() -> None:
    hopeless = estimate([_named("match_rate", None)], 5.0, 600, samples=2000)
    fine = estimate([_named("match_rate", 10)], 5.0, 600, samples=2000)
    since = hopeless_since(None, hopeless, 100.0)
    assert since == 100.0 and hopeless_since(since, hopeless, 130.0) == 100.0
    assert not ends_early(since, 159.9) and ends_early(since, 160.0)
    assert hopeless_since(since, fine, 140.0) is None and not ends_early(None, 1e9)


def test_a_need_in_the_checks_own_samples_is_timed_at_their_rate() -> None:
    """Traffic where one request in ten is deterministic: the gate's samples (comparisons)
    arrive at 2/s, the error check's pairs at 20/s. Its need of 6,000 more pairs is 300 s,
    not 3,000 s, and neither it nor the binding choice may read pairs as comparisons."""
    errors = Check("errors", "inconclusive", "", need=Need(6000, of=20_000))
    match = Check("match_rate", "inconclusive", "", need=Need(1000))
    e = estimate([errors, match], rate_per_s=2.0, timeout_left_s=400, samples=2000)
    assert e.check == "match rate" and e.more_samples == 1000  # 500 s against 300 s
    assert e.seconds_left == 500.0
    alone = estimate([errors], rate_per_s=2.0, timeout_left_s=100, samples=2000)
    assert alone.more_samples == 600 and alone.seconds_left == 300.0
    # 300 s is within 4x the 100 s left: not hopeless (read as comparisons, 3,000 s was)
    assert not alone.hopeless
