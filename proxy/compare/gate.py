"""The promotion gate: pass / fail / inconclusive from aggregates and frozen criteria (no I/O).

Old = primary, new = shadow. Checks, each pass, fail or inconclusive:
- samples: enough deterministic requests compared new-vs-old (below it, at best inconclusive);
- match rate: the Wilson interval of the new-vs-old match rate against a threshold, that is
  the baseline (old-vs-old) match rate minus the allowed excess divergence, or an absolute
  rate without baseline. Pass when the lower bound clears it, fail when the upper bound
  does not, otherwise inconclusive (more samples needed);
- latency: new/old ratios of TTFT and TPOT percentiles; a ratio over its limit fails only
  when a one-sided Mann-Whitney U test says new is slower (p < alpha, effect >= minimum);
- output lengths: new vs old distribution (all requests, sampled ones included): fails on a
  significant shift larger than the limit;
- errors: new error rate against old's plus an allowance (fail needs the lower bound over);
- coverage: the share of sampled requests that were mirrored at all; below the minimum
  (shedding under load) at best inconclusive: evidence from a sliver of the traffic is
  not a pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from proxy.compare.stats import LatencySamples, LatencySummary, mann_whitney, ratio, wilson_interval
from proxy.compare.tally import AdmissionCounts, GateInputs, MatchCounts

__all__ = ["AdmissionCounts", "GateCriteria", "GateInputs", "MatchCounts", "Verdict",
           "analysis_body", "evaluate"]

VerdictName = Literal["pass", "fail", "inconclusive"]
_SEVERITY: dict[VerdictName, int] = {"fail": 0, "inconclusive": 1, "pass": 2}


@dataclass(frozen=True)
class GateCriteria:
    """Configurable thresholds of the gate; built once at the edge (CLI or admin API)."""

    min_samples: int = 50
    min_baseline_samples: int = 50
    confidence: float = 0.95
    max_excess_divergence: float = 0.05  # allowed match-rate drop below the baseline's
    min_match_rate: float = 0.90  # absolute threshold when there is no baseline
    require_baseline: bool = False
    close_counts_as_match: bool = False  # vLLM's own tests accept top-k-close divergences
    min_latency_samples: int = 30
    max_ttft_p50_ratio: float | None = 1.10
    max_ttft_p99_ratio: float | None = 1.25
    max_tpot_p50_ratio: float | None = 1.10
    max_tpot_p99_ratio: float | None = 1.25
    alpha: float = 0.05
    min_effect_size: float = 0.1  # rank-biserial; smaller shifts are negligible
    max_error_rate_excess: float = 0.01
    max_length_shift: float | None = 0.3  # |rank-biserial| of output lengths new vs old
    min_coverage: float = 0.5  # share of sampled requests mirrored (the rest shed under load)

    def __post_init__(self) -> None:
        for name in ("confidence", "alpha"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be within (0, 1), got {value!r}")
        for name in ("max_excess_divergence", "min_match_rate", "min_effect_size",
                     "max_error_rate_excess", "max_length_shift", "min_coverage"):
            value = getattr(self, name)
            if value is None:
                continue
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")
        for name in ("min_samples", "min_baseline_samples", "min_latency_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name, _metric, _stat, limit in self.ratio_limits():
            if limit <= 0:
                raise ValueError(f"{name} must be > 0, got {limit!r}")

    def ratio_limits(self) -> list[tuple[str, str, str, float]]:
        """(field name, metric, percentile, limit) for each enabled latency ratio limit."""
        out = []
        for f in fields(self):
            if f.name.startswith("max_") and f.name.endswith("_ratio"):
                limit = getattr(self, f.name)
                if limit is not None:
                    _, metric, stat, _ = f.name.split("_")
                    out.append((f.name, metric, stat, limit))
        return out


@dataclass(frozen=True)
class Verdict:
    """The gate's answer; `reasons` lists every check, most severe first."""

    verdict: VerdictName
    reasons: list[str]
    samples: int
    details: dict[str, Any]

    @property
    def http_status(self) -> int:
        """200 on pass, 409 otherwise: what the admin gate endpoint answers."""
        return 200 if self.verdict == "pass" else 409

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)


def analysis_body(result: dict[str, Any]) -> dict[str, Any]:
    """A verdict dict with `pass` added: what an Argo Rollouts `web` analysis reads
    (`successCondition: result.pass == true`)."""
    return {"pass": result["verdict"] == "pass", **result}


@dataclass(frozen=True)
class _Check:
    status: VerdictName
    reason: str


def evaluate(inputs: GateInputs, criteria: GateCriteria | None = None) -> Verdict:
    """Judge whether the shadow (new) may be promoted over the primary (old)."""
    criteria = criteria or GateCriteria()
    details: dict[str, Any] = {"criteria": asdict(criteria)}
    checks = [
        _check_samples(inputs, criteria),
        _check_match_rate(inputs, criteria, details),
        *_check_latency(inputs, criteria, details),
        *_check_lengths(inputs, criteria, details),
        _check_errors(inputs, criteria, details),
        *_check_coverage(inputs, criteria, details),
    ]
    checks.sort(key=lambda c: _SEVERITY[c.status])
    verdict = checks[0].status
    return Verdict(
        verdict=verdict,
        reasons=[f"{c.status}: {c.reason}" for c in checks],
        samples=inputs.new_vs_old.compared,
        details=details,
    )


def _check_samples(inputs: GateInputs, c: GateCriteria) -> _Check:
    n = inputs.new_vs_old.compared
    if n < c.min_samples:
        return _Check("inconclusive", f"{n} deterministic requests compared, need {c.min_samples}")
    return _Check("pass", f"{n} deterministic requests compared (minimum {c.min_samples})")


def _check_match_rate(inputs: GateInputs, c: GateCriteria, details: dict[str, Any]) -> _Check:
    new = inputs.new_vs_old
    base = inputs.baseline_vs_old
    if c.close_counts_as_match:
        new = new.counting_close_as_match()
        base = base.counting_close_as_match() if base is not None else None
    low, high = wilson_interval(new.matched, new.compared, c.confidence)
    details["match"] = {"new_vs_old": {**asdict(new), "rate": new.match_rate,
                                       "interval": [low, high]},
                        "baseline_vs_old": None if base is None else {
                            **asdict(base), "rate": base.match_rate,
                            "interval": list(wilson_interval(base.matched, base.compared,
                                                             c.confidence))}}
    if base is None or base.compared == 0:
        if c.require_baseline:
            return _Check("inconclusive", "no baseline (old-vs-old) comparisons yet")
        threshold, against = c.min_match_rate, "absolute minimum"
    elif base.compared < c.min_baseline_samples:
        return _Check("inconclusive", f"baseline has {base.compared} comparisons, "
                                      f"need {c.min_baseline_samples}")
    else:
        threshold = max(0.0, (base.match_rate or 0.0) - c.max_excess_divergence)
        against = f"baseline {base.match_rate:.3f} - {c.max_excess_divergence:g}"
    details["match"]["threshold"] = threshold
    pct = f"{c.confidence:.0%}"
    text = (f"new-vs-old match rate {new.match_rate if new.compared else 0:.3f} "
            f"({new.matched}/{new.compared}, {pct} interval {low:.3f}..{high:.3f}) "
            f"vs {threshold:.3f} ({against})")
    if new.compared and high < threshold:
        return _Check("fail", text + ": upper bound below")
    if new.compared and low >= threshold:
        return _Check("pass", text + ": lower bound clears it")
    return _Check("inconclusive", text + ": interval straddles it")


def _check_latency(inputs: GateInputs, c: GateCriteria, details: dict[str, Any]) -> list[_Check]:
    old = inputs.latency.get("primary", LatencySamples())
    new = inputs.latency.get("shadow", LatencySamples())
    old_sum, new_sum = old.summaries(), new.summaries()
    latency: dict[str, Any] = {"old": {k: asdict(v) for k, v in old_sum.items()},
                               "new": {k: asdict(v) for k, v in new_sum.items()}, "tests": {}}
    details["latency"] = latency
    checks = []
    for name, metric, stat, limit in c.ratio_limits():
        label = f"{metric.upper()} {stat}"
        o, n = old.metric(metric), new.metric(metric)
        if min(len(o), len(n)) < c.min_latency_samples:
            checks.append(_Check("inconclusive", f"{label}: {len(o)} old / {len(n)} new samples, "
                                                 f"need {c.min_latency_samples}"))
            continue
        r = ratio(_stat(new_sum[metric], stat), _stat(old_sum[metric], stat))
        if metric not in latency["tests"]:
            test = mann_whitney(o, n, alternative="greater")
            latency["tests"][metric] = None if test is None else asdict(test)
        test_d = latency["tests"][metric]
        latency.setdefault("ratios", {})[name] = r
        if r is None:
            checks.append(_Check("inconclusive", f"{label}: old value is zero, no ratio"))
            continue
        text = f"{label} new/old {r:.3f} (limit {limit:g})"
        if r <= limit:
            checks.append(_Check("pass", text))
            continue
        significant = (test_d is not None and test_d["p_value"] < c.alpha
                       and test_d["effect_size"] >= c.min_effect_size)
        tail = (f"Mann-Whitney p={test_d['p_value']:.3g}, effect {test_d['effect_size']:.2f}"
                if test_d is not None else "no test")
        if significant:
            checks.append(_Check("fail", f"{text}, new slower ({tail})"))
        else:
            checks.append(_Check("inconclusive", f"{text} but not significant ({tail})"))
    return checks


def _check_lengths(inputs: GateInputs, c: GateCriteria, details: dict[str, Any]) -> list[_Check]:
    if c.max_length_shift is None:
        return []
    old = inputs.latency.get("primary", LatencySamples()).output_tokens
    new = inputs.latency.get("shadow", LatencySamples()).output_tokens
    if not old and not new:
        return []  # lengths not recorded by the caller: nothing to judge
    if min(len(old), len(new)) < c.min_latency_samples:
        return [_Check("inconclusive", f"output lengths: {len(old)} old / {len(new)} new "
                                       f"samples, need {c.min_latency_samples}")]
    test = mann_whitney(old, new)
    details["lengths"] = None if test is None else asdict(test)
    if test is None:
        return []
    text = (f"output length shift {test.effect_size:+.2f} (limit {c.max_length_shift:g}, "
            f"Mann-Whitney p={test.p_value:.3g})")
    if abs(test.effect_size) > c.max_length_shift and test.p_value < c.alpha:
        return [_Check("fail", text)]
    return [_Check("pass", text)]


def _check_errors(inputs: GateInputs, c: GateCriteria, details: dict[str, Any]) -> _Check:
    n_new, e_new = inputs.requests.get("shadow", 0), inputs.errors.get("shadow", 0)
    n_old, e_old = inputs.requests.get("primary", 0), inputs.errors.get("primary", 0)
    rate_old = e_old / n_old if n_old else 0.0
    limit = min(1.0, rate_old + c.max_error_rate_excess)
    details["errors"] = {"new": {"requests": n_new, "errors": e_new},
                         "old": {"requests": n_old, "errors": e_old}, "limit": limit}
    if n_new == 0:
        return _Check("inconclusive", "no requests of the new version completed")
    e_new = min(e_new, n_new)
    rate_new = e_new / n_new
    low, _ = wilson_interval(e_new, n_new, c.confidence)
    text = f"new error rate {rate_new:.3f} ({e_new}/{n_new}) vs limit {limit:.3f}"
    if low > limit:
        return _Check("fail", text)
    if rate_new <= limit:
        return _Check("pass", text)
    return _Check("inconclusive", text + " (above, not significant)")


def _check_coverage(inputs: GateInputs, c: GateCriteria,
                    details: dict[str, Any]) -> list[_Check]:
    admission = inputs.admission
    if admission is None or admission.coverage is None:
        return []  # nothing counted: records from elsewhere, or no request sampled yet
    coverage = admission.coverage
    details["coverage"] = {**admission.as_json(), "compared": inputs.new_vs_old.compared,
                           "minimum": c.min_coverage}
    text = (f"{admission.mirrored} of {admission.eligible} sampled requests mirrored "
            f"({coverage:.1%}, minimum {c.min_coverage:.0%})")
    if admission.shed_total:
        text += (f"; {admission.shed_total} shed ({1 - coverage:.1%}): "
                 f"{admission.shed_text()}")
    if coverage < c.min_coverage:
        return [_Check("inconclusive", text)]
    return [_Check("pass", text)]


def _stat(summary: LatencySummary, stat: str) -> float | None:
    value: float | None = getattr(summary, f"{stat}_s")
    return value

