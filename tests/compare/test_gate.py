from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from proxy.compare.gate import AdmissionCounts, GateCriteria, GateInputs, MatchCounts, evaluate
from proxy.compare.stats import LatencySamples


def latency(seed: int, scale: float = 1.0, n: int = 200) -> LatencySamples:
    rng = random.Random(seed)
    ttft = tuple(scale * rng.lognormvariate(-3.0, 0.2) for _ in range(n))
    tpot = tuple(scale * rng.lognormvariate(-4.5, 0.2) for _ in range(n))
    lengths = tuple(rng.randint(50, 150) for _ in range(n))
    return LatencySamples(ttft_s=ttft, tpot_s=tpot, itl_s=tpot, e2e_s=ttft, output_tokens=lengths)


def inputs(new: tuple[int, int] = (200, 0), base: tuple[int, int] | None = (200, 2),
           new_latency: LatencySamples | None = None, shadow_errors: int = 0) -> GateInputs:
    return GateInputs(
        new_vs_old=MatchCounts(*new),
        baseline_vs_old=MatchCounts(*base) if base is not None else None,
        latency={"primary": latency(1), "shadow": new_latency or latency(2)},
        requests={"primary": 200, "shadow": 200},
        errors={"primary": 0, "shadow": shadow_errors},
    )


def statuses(verdict_reasons: list[str], word: str) -> list[str]:
    return [r for r in verdict_reasons if r.startswith(word)]


def test_healthy_new_version_passes() -> None:
    verdict = evaluate(inputs())
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.samples == 200
    assert len(verdict.reasons) == 8 and all(r.startswith("pass:") for r in verdict.reasons)


def test_too_few_samples_is_inconclusive() -> None:
    verdict = evaluate(inputs(new=(10, 0)))
    assert verdict.verdict == "inconclusive"
    assert "inconclusive: 10 deterministic requests compared, need 50" in verdict.reasons


def test_divergence_beyond_baseline_noise_fails_even_with_few_samples() -> None:
    verdict = evaluate(inputs(new=(200, 50), base=(200, 1)))
    assert verdict.verdict == "fail"
    assert "upper bound below" in verdict.reasons[0]
    assert evaluate(inputs(new=(20, 20))).verdict == "fail"


def test_divergence_within_baseline_noise_passes() -> None:
    # old-vs-old already diverges on 20%: the new version diverging on 22% is noise
    verdict = evaluate(inputs(new=(1000, 220), base=(1000, 200)),
                       GateCriteria(max_excess_divergence=0.05))
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.details["match"]["threshold"] == pytest.approx(0.75)


def test_interval_straddling_threshold_is_inconclusive() -> None:
    verdict = evaluate(inputs(new=(60, 5), base=(60, 0)))
    assert verdict.verdict == "inconclusive"
    assert any("interval straddles" in r for r in verdict.reasons)


def test_without_baseline_absolute_rate_or_required_baseline() -> None:
    assert evaluate(inputs(base=None)).verdict == "pass"
    assert evaluate(inputs(new=(200, 40), base=None)).verdict == "fail"
    verdict = evaluate(inputs(base=None), GateCriteria(require_baseline=True))
    assert verdict.verdict == "inconclusive"
    assert any("no baseline" in r for r in verdict.reasons)
    few = evaluate(inputs(base=(10, 0)))
    assert few.verdict == "inconclusive" and any("baseline has 10" in r for r in few.reasons)


def test_significantly_slower_new_version_fails_on_latency() -> None:
    verdict = evaluate(inputs(new_latency=latency(2, scale=1.5)))
    assert verdict.verdict == "fail"
    failed = statuses(verdict.reasons, "fail:")
    assert any(r.startswith("fail: TTFT p50 new/old 1.5") and "new slower" in r for r in failed)
    assert verdict.details["latency"]["tests"]["ttft"]["p_value"] < 1e-6


def test_tail_only_regression_without_significance_is_inconclusive() -> None:
    base = latency(1)
    tail = tuple(v * 4 if i % 40 == 0 else v for i, v in enumerate(base.ttft_s))
    verdict = evaluate(inputs(new_latency=replace(base, ttft_s=tail)))
    assert verdict.verdict == "inconclusive", verdict.reasons
    assert any("TTFT p99" in r and "not significant" in r for r in verdict.reasons)
    relaxed = GateCriteria(max_ttft_p99_ratio=None)
    assert evaluate(inputs(new_latency=replace(base, ttft_s=tail)), relaxed).verdict == "pass"


def test_missing_latency_samples_are_inconclusive() -> None:
    verdict = evaluate(inputs(new_latency=latency(2, n=5)))
    assert verdict.verdict == "inconclusive"
    assert any("200 old / 5 new samples, need 30" in r for r in verdict.reasons)


@pytest.mark.parametrize(("errors", "expected"), [(0, "pass"), (2, "pass"), (4, "inconclusive"),
                                                   (20, "fail")])
def test_shadow_error_rate(errors: int, expected: str) -> None:
    verdict = evaluate(inputs(shadow_errors=errors))
    assert verdict.verdict == expected, verdict.reasons


def test_verdict_json_shape() -> None:
    doc = json.loads(evaluate(inputs(new=(10, 0))).to_json())
    assert doc["verdict"] == "inconclusive" and doc["samples"] == 10
    assert isinstance(doc["reasons"], list) and doc["details"]["criteria"]["min_samples"] == 50


def test_criteria_validation_quotes_value() -> None:
    with pytest.raises(ValueError, match="confidence must be within \\(0, 1\\), got 1.5"):
        GateCriteria(confidence=1.5)
    with pytest.raises(ValueError, match="min_samples must be >= 1, got 0"):
        GateCriteria(min_samples=0)
    with pytest.raises(ValueError, match="max_tpot_p99_ratio must be > 0, got -1"):
        GateCriteria(max_tpot_p99_ratio=-1)


def test_close_divergences_can_count_as_matches() -> None:
    counts = MatchCounts(200, 40, close=38)
    strict = evaluate(replace(inputs(), new_vs_old=counts, baseline_vs_old=MatchCounts(200, 2)))
    assert strict.verdict == "fail"
    lenient = evaluate(replace(inputs(), new_vs_old=counts, baseline_vs_old=MatchCounts(200, 2)),
                       GateCriteria(close_counts_as_match=True))
    assert lenient.verdict == "pass", lenient.reasons
    assert lenient.http_status == 200 and strict.http_status == 409


def test_shifted_output_lengths_fail() -> None:
    base = latency(2)
    longer = replace(base, output_tokens=tuple(x + 60 for x in base.output_tokens))
    verdict = evaluate(inputs(new_latency=longer))
    assert verdict.verdict == "fail"
    assert verdict.reasons[0].startswith("fail: output length shift +0.")
    assert evaluate(inputs(new_latency=longer), GateCriteria(max_length_shift=None)).verdict == "pass"


def test_unrecorded_output_lengths_skip_the_length_check() -> None:
    bare = {role: replace(samples, output_tokens=()) for role, samples in inputs().latency.items()}
    verdict = evaluate(replace(inputs(), latency=bare))
    assert verdict.verdict == "pass" and len(verdict.reasons) == 7
    few = dict(bare, shadow=replace(bare["shadow"], output_tokens=(1, 2)))
    assert evaluate(replace(inputs(), latency=few)).verdict == "inconclusive"


def covered(eligible: int, **shed: int) -> GateInputs:
    return replace(inputs(), admission=AdmissionCounts(eligible, shed))


def test_coverage_below_the_minimum_is_inconclusive_and_names_the_drops() -> None:
    verdict = evaluate(covered(4000, overload=3000, worker_busy=800))
    assert verdict.verdict == "inconclusive"
    assert ("inconclusive: 200 of 4000 sampled requests mirrored (5.0%, minimum 50%); "
            "3800 shed (95.0%): overload 3000, worker_busy 800") in verdict.reasons
    coverage = verdict.details["coverage"]
    assert coverage["coverage"] == 0.05 and coverage["drop_rate"] == 0.95
    assert coverage["compared"] == 200 and coverage["minimum"] == 0.5


def test_coverage_over_the_minimum_passes_and_still_says_what_was_shed() -> None:
    verdict = evaluate(covered(210, worker_busy=10))
    assert verdict.verdict == "pass", verdict.reasons
    assert ("pass: 200 of 210 sampled requests mirrored (95.2%, minimum 50%); "
            "10 shed (4.8%): worker_busy 10") in verdict.reasons
    assert "pass: 200 of 200 sampled requests mirrored (100.0%, minimum 50%)" in \
        evaluate(covered(200)).reasons


def test_coverage_minimum_is_configurable_and_checked() -> None:
    assert evaluate(covered(210, worker_busy=10),
                    GateCriteria(min_coverage=0.99)).verdict == "inconclusive"
    assert evaluate(covered(4000, overload=3800),
                    GateCriteria(min_coverage=0.0)).verdict == "pass"
    with pytest.raises(ValueError, match="min_coverage must be within"):
        GateCriteria(min_coverage=1.5)


def test_no_admission_counts_no_coverage_check() -> None:
    """Records from elsewhere (or before any request was sampled): nothing to judge."""
    for admission in (None, AdmissionCounts(0, {})):
        verdict = evaluate(replace(inputs(), admission=admission))
        assert "coverage" not in verdict.details
        assert not [r for r in verdict.reasons if "sampled requests mirrored" in r]


def test_admission_counts_fold_outcomes() -> None:
    counts = AdmissionCounts.of([("eligible", 30), ("worker_busy", 2), ("eligible", 10),
                                 ("overload", 5), ("worker_busy", 1), ("inflight_cap", 0)])
    assert (counts.eligible, dict(counts.shed)) == (40, {"overload": 5, "worker_busy": 3})
    assert counts.shed_text() == "overload 5, worker_busy 3"
    assert (counts.mirrored, counts.coverage) == (32, 0.8)
    assert AdmissionCounts().coverage is None
