"""The promotion gate: pass / fail / inconclusive from aggregates and frozen criteria (no I/O).

Old = primary (or, for latency, the baseline: a second old copy), new = shadow. The live
gate is evaluated again and again and the cutover acts at the first evaluation that
decides, so every statistical check uses confidence sequences, bounds that hold at every
look at once (`proxy.gate.sequential`). A promotion needs every check to pass, so each
check's pass side may spend all of 1 - confidence (an intersection-union test); an abort
needs one check to fail, so the fail side is split over the checks (`GateCriteria`
`pass_alpha` / `fail_alpha`): a version beyond a limit is promoted, or a good one aborted,
with probability at most 1 - confidence however often the gate is asked. Checks:
- samples: enough deterministic requests compared new-vs-old (below it, at best inconclusive);
- match rate (`checks.match_rate`): new-vs-old against old-vs-old (the baseline, with its
  own bounds) minus the allowed excess divergence, or an absolute rate without baseline;
- latency (`latency_checks`): paired per-request p50 where a baseline times the same
  requests, else new/old quantile ratios with bounds on both quantiles; an absolute
  floor; only the kinds of traffic (streamed, unstreamed) that exist;
- output lengths (paired per request), error rate over old's (`checks`);
- coverage: the share of sampled requests that were mirrored at all; below the minimum
  (shedding under load) at best inconclusive: evidence from a sliver of the traffic is
  not a pass.
An inconclusive check says how far its bound is and about how many more samples would
decide it (`Check.need`). The checks return what they found; `Verdict.details` writes
it out as the admin API's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from proxy.gate.checks import Check, Need, error_rate, length_shift, match_rate
from proxy.gate.criteria import RATIO_LIMITS, GateCriteria, RatioLimit
from proxy.gate.latency_checks import LatencyFacts, latency_checks
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import AdmissionCounts, GateInputs, MatchCounts

__all__ = ["RATIO_LIMITS", "AdmissionCounts", "Check", "CoverageFacts", "GateCriteria",
           "GateFacts", "GateInputs", "MatchCounts", "Need", "RatioLimit", "Verdict",
           "analysis_body", "evaluate"]

VerdictName = Literal["pass", "fail", "inconclusive"]
_SEVERITY: dict[VerdictName, int] = {"fail": 0, "inconclusive": 1, "pass": 2}


@dataclass(frozen=True)
class CoverageFacts:
    """The admission counts the coverage check judged."""

    admission: AdmissionCounts
    compared: int
    minimum: float

    def as_json(self) -> dict[str, object]:
        return {**self.admission.as_json(), "compared": self.compared,
                "minimum": self.minimum}


@dataclass(frozen=True)
class GateFacts:
    """What the checks found, by check: the criteria, match rate, errors, and where judged,
    output lengths, latency and coverage."""

    criteria: GateCriteria
    match: Check
    errors: Check
    lengths: Check | None = None  # None: lengths not judged
    latency: LatencyFacts | None = None  # None: no latency limit enabled
    coverage: CoverageFacts | None = None  # None: admission not counted

    def as_json(self, checks: Sequence[Check]) -> dict[str, Any]:
        """`details` as the admin API writes it (keys in this order)."""
        c = self.criteria
        details: dict[str, Any] = {"criteria": asdict(c),
                                   "alpha": {"pass_per_check": round(c.pass_alpha(), 12),
                                             "fail_per_check": round(c.fail_alpha(), 12)},
                                   "match": self.match.facts_json() or None}
        if self.lengths is not None:
            details["lengths"] = self.lengths.facts_json()
        details["errors"] = self.errors.facts_json()
        if self.latency is not None:
            details["latency"] = self.latency.as_json()
        if self.coverage is not None:
            details["coverage"] = self.coverage.as_json()
        details["checks"] = [check.as_json() for check in checks]
        return details


@dataclass(frozen=True)
class Verdict:
    """The gate's answer; `checks` (and `reasons`, one line each) most severe first."""

    verdict: VerdictName
    reasons: list[str]
    samples: int
    checks: tuple[Check, ...]
    facts: GateFacts

    @property
    def http_status(self) -> int:
        """200 on pass, 409 otherwise: what the admin gate endpoint answers."""
        return 200 if self.verdict == "pass" else 409

    @property
    def details(self) -> dict[str, Any]:
        """The facts as JSON (the wire form: the admin API, reports)."""
        return self.facts.as_json(self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": list(self.reasons),
                "samples": self.samples, "details": self.details}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)


def analysis_body(result: dict[str, Any]) -> dict[str, Any]:
    """A verdict dict with `pass` added: what an Argo Rollouts `web` analysis reads
    (`successCondition: result.pass == true`)."""
    return {"pass": result["verdict"] == "pass", **result}


def evaluate(inputs: GateInputs, criteria: GateCriteria | None = None) -> Verdict:
    """Judge whether the shadow (new) may be promoted over the primary (old)."""
    criteria = criteria or GateCriteria()
    old, new = _lengths(inputs)
    matched = match_rate(inputs, criteria)
    lengths = length_shift(old, new, criteria)
    errors = error_rate(inputs, criteria)
    latency = latency_checks(inputs, criteria)
    coverage = _check_coverage(inputs, criteria)
    checks = [
        _check_samples(inputs, criteria),
        matched,
        *(latency.checks if latency is not None else ()),
        *lengths,
        errors,
        *((coverage[0],) if coverage is not None else ()),
    ]
    checks.sort(key=lambda c: _SEVERITY[c.status])
    facts = GateFacts(criteria, matched, errors, lengths[0] if lengths else None, latency,
                      coverage[1] if coverage is not None else None)
    return Verdict(
        verdict=checks[0].status,
        reasons=[f"{c.status}: {c.reason}" for c in checks],
        samples=inputs.new_vs_old.compared,
        checks=tuple(checks),
        facts=facts,
    )


def _lengths(inputs: GateInputs) -> tuple[Sequence[float], Sequence[float]]:
    """Output tokens of old and new: per-request pairs where records give them; else each
    role's lengths in arrival order (Prometheus histograms have no pairs); else none (the
    caller recorded no lengths: not judged)."""
    paired = inputs.pairs.get("output_tokens")
    if paired is not None and len(paired):
        return paired.old, paired.new
    old = inputs.latency.get("primary", LatencySamples()).output_tokens
    new = inputs.latency.get("shadow", LatencySamples()).output_tokens
    return old, new


def _check_samples(inputs: GateInputs, c: GateCriteria) -> Check:
    n = inputs.new_vs_old.compared
    if n < c.min_samples:
        return Check("samples", "inconclusive",
                     f"{n} deterministic requests compared, need {c.min_samples}",
                     need=Need(c.min_samples - n, has_gap=False))
    return Check("samples", "pass", f"{n} deterministic requests compared "
                 f"(minimum {c.min_samples})")


def _check_coverage(inputs: GateInputs,
                    c: GateCriteria) -> tuple[Check, CoverageFacts] | None:
    admission = inputs.admission
    if admission is None or admission.coverage is None:
        return None  # nothing counted: records from elsewhere, or no request sampled yet
    coverage = admission.coverage
    facts = CoverageFacts(admission, inputs.new_vs_old.compared, c.min_coverage)
    mirrorable = admission.eligible - admission.unmirrorable
    kind = "mirrorable sampled" if admission.unmirrorable else "sampled"
    text = (f"{admission.mirrored} of {mirrorable} {kind} requests mirrored "
            f"({coverage:.1%}, minimum {c.min_coverage:.0%})")
    if admission.unmirrorable:
        text += (f"; {admission.unmirrorable} not mirrorable (Responses-API state the shadow "
                 "lacks), not counted")
    load_shed = admission.shed_total - admission.unmirrorable
    if load_shed:
        text += (f"; {load_shed} shed ({1 - coverage:.1%}): "
                 f"{admission.shed_text()}")
    status: VerdictName = "inconclusive" if coverage < c.min_coverage else "pass"
    return Check("coverage", status, text), facts
