from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from proxy.gate.criteria import RATIO_LIMITS
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import Pairs
from proxy.gate.verdict import AdmissionCounts, GateCriteria, GateInputs, MatchCounts, evaluate

N = 3000  # the anytime-valid bounds of a p99 need thousands of samples


def latency(seed: int, scale: float = 1.0, n: int = N) -> LatencySamples:
    rng = random.Random(seed)
    ttft = tuple(scale * rng.lognormvariate(-3.0, 0.2) for _ in range(n))
    tpot = tuple(scale * rng.lognormvariate(-4.5, 0.2) for _ in range(n))
    lengths = tuple(rng.randint(50, 150) for _ in range(n))
    return LatencySamples(ttft_s=ttft, tpot_s=tpot, itl_s=tpot, e2e_s=ttft, output_tokens=lengths)


def inputs(new: tuple[int, int] = (N, 0), base: tuple[int, int] | None = (N, 30),
           new_latency: LatencySamples | None = None, shadow_errors: int = 0) -> GateInputs:
    return GateInputs(
        new_vs_old=MatchCounts(*new),
        baseline_vs_old=MatchCounts(*base) if base is not None else None,
        latency={"primary": latency(1), "shadow": new_latency or latency(2)},
        requests={"primary": N, "shadow": N},
        errors={"primary": 0, "shadow": shadow_errors},
    )


def statuses(verdict_reasons: list[str], word: str) -> list[str]:
    return [r for r in verdict_reasons if r.startswith(word)]


def test_healthy_new_version_passes() -> None:
    verdict = evaluate(inputs())
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.samples == N
    # samples, match rate, TTFT/TPOT p50/p99 (the unstreamed family: no such traffic),
    # lengths, errors
    assert len(verdict.reasons) == 8 and all(r.startswith("pass:") for r in verdict.reasons)
    assert verdict.details["latency"]["families_judged"] == ["streamed"]


def test_too_few_samples_is_inconclusive() -> None:
    verdict = evaluate(inputs(new=(10, 0)))
    assert verdict.verdict == "inconclusive"
    assert "inconclusive: 10 deterministic requests compared, need 50" in verdict.reasons
    samples = next(c for c in verdict.details["checks"] if c["name"] == "samples")
    assert samples["more_samples"] == 40


def test_divergence_beyond_baseline_noise_fails_even_with_few_samples() -> None:
    verdict = evaluate(inputs(new=(200, 50), base=(200, 1)))
    assert verdict.verdict == "fail"
    assert "upper bound below" in verdict.reasons[0]
    assert evaluate(inputs(new=(20, 20))).verdict == "fail"


def test_divergence_within_baseline_noise_passes() -> None:
    # old-vs-old already diverges on 20%: the new version diverging on 22% is noise
    verdict = evaluate(inputs(new=(20000, 4200), base=(20000, 4000)),
                       GateCriteria(max_excess_divergence=0.05))
    assert verdict.verdict == "pass", verdict.reasons
    # the threshold is the baseline's upper bound (its own uncertainty counted) - 0.05
    threshold = verdict.details["match"]["threshold"]
    assert 0.75 < threshold < 0.77
    # the same rates on a tenth of the samples: the baseline's bounds are too wide
    few = evaluate(inputs(new=(2000, 420), base=(2000, 400)))
    assert few.verdict == "inconclusive"


def test_interval_straddling_threshold_is_inconclusive() -> None:
    verdict = evaluate(inputs(new=(60, 1), base=(60, 0)))
    assert verdict.verdict == "inconclusive"
    reason = next(r for r in verdict.reasons if "match rate" in r)
    assert "short; about" in reason and "more samples at the current rates" in reason
    facts = next(c for c in verdict.details["checks"] if c["name"] == "match_rate")
    assert facts["gap"] > 0 and facts["more_samples"] > 0
    # that many more at the same rates decides it
    grown = round(60 + facts["more_samples"]) + 5
    assert evaluate(inputs(new=(grown, grown // 60), base=(grown, 0))).verdict != "fail"


def test_eval_compare_one_look_says_how_many_prompts_a_pass_needs() -> None:
    """30 identical answers cannot clear 0.9 at 95 % (Clopper-Pearson): bring 36."""
    once = GateCriteria(min_samples=20, looks="once")
    verdict = evaluate(inputs(new=(30, 0), base=None), once)
    reason = next(r for r in verdict.reasons if "match rate" in r)
    assert reason.startswith("inconclusive") and "a pass needs 36 or more prompts" in reason
    assert evaluate(inputs(new=(36, 0), base=None), once).verdict == "pass"


def test_without_baseline_absolute_rate_or_required_baseline() -> None:
    assert evaluate(inputs(base=None)).verdict == "pass"
    assert evaluate(inputs(new=(N, 600), base=None)).verdict == "fail"
    verdict = evaluate(inputs(base=None), GateCriteria(require_baseline=True))
    assert verdict.verdict == "inconclusive"
    assert any("no baseline" in r for r in verdict.reasons)
    few = evaluate(inputs(base=(10, 0)))
    assert few.verdict == "inconclusive" and any("baseline has 10" in r for r in few.reasons)
    few = evaluate(inputs(base=(10, 0)))
    assert few.verdict == "inconclusive" and any("baseline has 10" in r for r in few.reasons)


def test_significantly_slower_new_version_fails_on_latency() -> None:
    verdict = evaluate(inputs(new_latency=latency(2, scale=1.5)))
    assert verdict.verdict == "fail"
    failed = statuses(verdict.reasons, "fail:")
    assert any(r.startswith("fail: TTFT p50 new/old 1.5") and "new slower" in r for r in failed)
    assert verdict.details["latency"]["ratios"]["max_ttft_p50_ratio"]["new"][0] > 1.1 * \
        verdict.details["latency"]["ratios"]["max_ttft_p50_ratio"]["old"][1]


def test_tail_only_regression_is_never_passed_and_fails_once_bounded() -> None:
    """4 % of first tokens 4x late: the p50 is unchanged, the p99 far beyond 1.25."""
    base = latency(1)
    tail = tuple(v * 4 if i % 25 == 0 else v for i, v in enumerate(latency(2).ttft_s))
    verdict = evaluate(inputs(new_latency=replace(latency(2), ttft_s=tail)))
    assert verdict.verdict == "fail", verdict.reasons
    assert any(r.startswith("fail: TTFT p99") for r in verdict.reasons)
    assert any(r.startswith("pass: TTFT p50") for r in verdict.reasons)
    # on 300 samples the p99 has no upper bound yet: inconclusive, never pass
    short = GateInputs(MatchCounts(N, 0), MatchCounts(N, 30),
                       latency={"primary": latency(1, n=300),
                                "shadow": replace(latency(2, n=300), ttft_s=tail[:300])},
                       requests={"primary": N, "shadow": N}, errors={})
    reason = next(r for r in evaluate(short).reasons if "TTFT p99" in r)
    assert reason.startswith("inconclusive") and "upper bound not yet defined" in reason
    relaxed = GateCriteria(max_ttft_p99_ratio=None)
    assert evaluate(inputs(new_latency=replace(base, ttft_s=base.ttft_s)), relaxed).verdict \
        == "pass"


def test_a_few_milliseconds_slower_is_never_a_regression() -> None:
    """Fast backends: a constant 3 ms more (a different clock, a busier reader) is 1.5x
    at 6 ms, under the 10 ms floor."""
    rng = random.Random(5)
    old = tuple(0.006 * rng.lognormvariate(0, 0.1) for _ in range(N))
    new = tuple(0.003 + 0.006 * rng.lognormvariate(0, 0.1) for _ in range(N))
    samples = {"primary": replace(latency(1), ttft_s=old),
               "shadow": replace(latency(1), ttft_s=new)}
    verdict = evaluate(replace(inputs(), latency=samples))
    assert verdict.verdict == "pass", verdict.reasons
    strict = evaluate(replace(inputs(), latency=samples), GateCriteria(latency_floor_s=0.0))
    assert strict.verdict == "fail"


def test_the_baseline_is_old_for_latency_when_it_has_samples() -> None:
    """The shadow and the baseline are read by the same worker: a slow primary clock
    (here: 2x) does not make new look faster or slower."""
    samples = {"primary": latency(1, scale=0.5), "shadow": latency(2),
               "baseline": latency(3)}
    pairs = {m: Pairs(samples["baseline"].metric(m), samples["shadow"].metric(m),
                      "capture worker") for m in ("ttft", "tpot")}
    verdict = evaluate(replace(inputs(), latency=samples, pairs=pairs))
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.details["latency"]["reference"]["ttft"] == "baseline"
    # with a baseline, the p50s are judged on the pairs: without them, never a pass
    unpaired = evaluate(replace(inputs(), latency=samples))
    assert unpaired.verdict == "inconclusive"
    assert any("TTFT p50: 0 paired requests" in r for r in unpaired.reasons)


def _paired(n: int, ratio: float, noise: float, seed: int) -> Pairs:
    """Per-request times driven by the request (lognormal sigma 1, as prompt lengths
    drive TTFT) with engine noise on each side; new `ratio` times old at the median."""
    rng = random.Random(seed)
    old, new = [], []
    for _ in range(n):
        base = rng.lognormvariate(-3.0, 1.0)
        old.append(base * rng.lognormvariate(0, noise))
        new.append(ratio * base * rng.lognormvariate(0, noise))
    return Pairs(tuple(old), tuple(new), "capture worker")


@pytest.mark.parametrize(("ratio", "want"), [(1.0, "pass"), (1.3, "fail")])
def test_paired_p50_decides_in_hundreds_where_lengths_spread_the_times(
        ratio: float, want: str) -> None:
    """Spread by lengths (sigma 1) hides a 30 % slowdown from the two quantiles' bounds at
    300 requests; on pairs the lengths cancel out and both verdicts are reached."""
    criteria = GateCriteria(**{e.field: None for e in RATIO_LIMITS if e.field !=
                               "max_ttft_p50_ratio"})
    pairs = _paired(300, ratio, 0.1, seed=7)
    samples = {"primary": LatencySamples(ttft_s=pairs.old), "baseline":
               LatencySamples(ttft_s=pairs.old), "shadow": LatencySamples(ttft_s=pairs.new)}
    got = evaluate(replace(inputs(), latency=samples, pairs={"ttft": pairs}), criteria)
    check = next(c for c in got.details["checks"] if c["name"] == "max_ttft_p50_ratio")
    assert check["status"] == want, check
    assert check["basis"] == "capture worker"
    unpaired = evaluate(replace(inputs(), latency={
        "primary": samples["primary"], "shadow": samples["shadow"]}), criteria)
    check = next(c for c in unpaired.details["checks"] if c["name"] == "max_ttft_p50_ratio")
    assert check["status"] == "inconclusive", check


def test_the_gate_judges_the_kinds_of_traffic_there_are() -> None:
    def unstreamed(seed: int) -> LatencySamples:
        s = latency(seed)
        return LatencySamples(e2e_unstreamed_s=s.ttft_s, tpot_unstreamed_s=s.tpot_s,
                              output_tokens=s.output_tokens)

    only = {"primary": unstreamed(1), "shadow": unstreamed(2)}
    verdict = evaluate(replace(inputs(), latency=only))
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.details["latency"]["families_judged"] == ["unstreamed"]
    assert not any("TTFT" in r for r in verdict.reasons)
    slow = {"primary": unstreamed(1),
            "shadow": replace(unstreamed(2), e2e_unstreamed_s=latency(2, scale=1.5).ttft_s)}
    assert evaluate(replace(inputs(), latency=slow)).verdict == "fail"
    both = {r: replace(latency(i), e2e_unstreamed_s=unstreamed(i).e2e_unstreamed_s,
                       tpot_unstreamed_s=unstreamed(i).tpot_unstreamed_s)
            for i, r in ((1, "primary"), (2, "shadow"))}
    judged = evaluate(replace(inputs(), latency=both))
    assert judged.details["latency"]["families_judged"] == ["streamed", "unstreamed"]
    # TTFT, TPOT and unstreamed per-token p99; the unstreamed E2E p99 is off by default.
    assert len([r for r in judged.reasons if "p99" in r]) == 3
    assert not any("E2E (unstreamed) p99" in r for r in judged.reasons)
    none = evaluate(replace(inputs(), latency={}))
    assert none.verdict == "inconclusive"
    assert "inconclusive: no latency samples yet (streamed or not)" in none.reasons


def test_missing_latency_samples_are_inconclusive() -> None:
    verdict = evaluate(inputs(new_latency=latency(2, n=5)))
    assert verdict.verdict == "inconclusive"
    assert any(f"{N} old / 5 new samples, need 30" in r for r in verdict.reasons)


@pytest.mark.parametrize(("errors", "expected"), [(0, "pass"), (2, "pass"), (30, "inconclusive"),
                                                   (120, "fail")])
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
    counts = MatchCounts(N, 600, close=590)
    strict = evaluate(replace(inputs(), new_vs_old=counts, baseline_vs_old=MatchCounts(N, 30)))
    assert strict.verdict == "fail"
    lenient = evaluate(replace(inputs(), new_vs_old=counts, baseline_vs_old=MatchCounts(N, 30)),
                       GateCriteria(close_counts_as_match=True))
    assert lenient.verdict == "pass", lenient.reasons
    assert lenient.http_status == 200 and strict.http_status == 409


def test_shifted_output_lengths_fail() -> None:
    base = latency(2)
    longer = replace(base, output_tokens=tuple(x + 60 for x in base.output_tokens))
    verdict = evaluate(inputs(new_latency=longer))
    assert verdict.verdict == "fail"
    assert verdict.reasons[0].startswith("fail: output length shift +0.")
    assert verdict.details["lengths"]["bounds"][0] > 0.3
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
    verdict = evaluate(covered(60000, overload=45000, worker_busy=12000))
    assert verdict.verdict == "inconclusive"
    assert ("inconclusive: 3000 of 60000 sampled requests mirrored (5.0%, minimum 50%); "
            "57000 shed (95.0%): overload 45000, worker_busy 12000") in verdict.reasons
    coverage = verdict.details["coverage"]
    assert coverage["coverage"] == 0.05 and coverage["drop_rate"] == 0.95
    assert coverage["compared"] == N and coverage["minimum"] == 0.5


def test_coverage_over_the_minimum_passes_and_still_says_what_was_shed() -> None:
    verdict = evaluate(covered(3150, worker_busy=150))
    assert verdict.verdict == "pass", verdict.reasons
    assert ("pass: 3000 of 3150 sampled requests mirrored (95.2%, minimum 50%); "
            "150 shed (4.8%): worker_busy 150") in verdict.reasons
    assert "pass: 3000 of 3000 sampled requests mirrored (100.0%, minimum 50%)" in \
        evaluate(covered(3000)).reasons


def test_coverage_minimum_is_configurable_and_checked() -> None:
    assert evaluate(covered(3150, worker_busy=150),
                    GateCriteria(min_coverage=0.99)).verdict == "inconclusive"
    assert evaluate(covered(60000, overload=57000),
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
