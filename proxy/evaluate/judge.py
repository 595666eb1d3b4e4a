"""`eval compare`'s verdict: new answers against the golden ones, request by request (no I/O).

Three things can go wrong across an upgrade and each has its own check:
- tokens: exact greedy match per request (the proxy's `compare`: first divergence, vLLM's
  top-k closeness rule), judged by the live gate's own rules (`gate.evaluate`: a Wilson
  interval against an absolute rate, or against the old-vs-old noise of a baseline);
- lengths: answers that end early while their first tokens still match (FlashInfer NVFP4
  answers shrinking to a third, flashinfer issue 3589) pass a look at the first tokens.
  Requests are paired, so a Wilcoxon signed-rank test on new - old output tokens says
  whether the shift is real and the ratio of total tokens says whether it matters;
- finish reasons: `length` turning into `stop` (or back) per request, its rate with a
  Wilson interval against a limit (plus the baseline's own rate).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from proxy.capture.request import request_meta
from proxy.capture.types import Capture
from proxy.compare.diff import compare
from proxy.compare.digest import ID_BLOCK_TOKENS, digest_answer, digest_ids
from proxy.compare.types import Comparison
from proxy.evaluate.golden import GoldenEntry
from proxy.evaluate.results import (
    BaselineSummary,
    CompareResult,
    DivergenceSummary,
    FinishStats,
    LengthStats,
    RequestRow,
)
from proxy.gate.stats import percentile, wilson_interval
from proxy.gate.verdict import GateCriteria, GateInputs, MatchCounts, VerdictName, evaluate

_SEVERITY: dict[VerdictName, int] = {"fail": 0, "inconclusive": 1, "pass": 2}
MAX_LISTED = 50


@dataclass(frozen=True)
class CompareCriteria:
    """Thresholds of `eval compare`; the token rules are the live gate's (`GateCriteria`)."""

    gate: GateCriteria = field(default_factory=lambda: GateCriteria(
        min_samples=20, min_baseline_samples=20, max_length_shift=None,
        max_ttft_p50_ratio=None, max_ttft_p99_ratio=None,
        max_tpot_p50_ratio=None, max_tpot_p99_ratio=None, max_e2e_unstreamed_p50_ratio=None,
        max_e2e_unstreamed_p99_ratio=None, max_tpot_unstreamed_p50_ratio=None,
        max_tpot_unstreamed_p99_ratio=None, looks="once"))
    max_length_change: float = 0.10  # |new/old total output tokens - 1| allowed
    max_finish_change: float = 0.05  # share of requests whose finish reason may change

    def __post_init__(self) -> None:
        for name in ("max_length_change", "max_finish_change"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")


@dataclass(frozen=True)
class Check:
    name: str
    status: VerdictName
    detail: str


def comparisons(golden: Sequence[GoldenEntry], answers: Sequence[Capture],
                against: str) -> list[Comparison]:
    out = []
    for entry, cap in zip(golden, answers, strict=True):
        meta = request_meta(entry.request.body, entry.request.endpoint)
        assert meta is not None  # a golden request is a JSON object
        golden_cap, gold = entry.capture, entry.capture.answer
        id_block = 1
        if entry.id_blocks is not None and entry.digest_key is not None:
            # Ids kept as block hashes: the new ids hashed alike, a divergence placed in a block.
            id_block = ID_BLOCK_TOKENS
            golden_cap = replace(golden_cap, token_ids=entry.id_blocks)
            if cap.token_ids is not None:
                cap = replace(cap, token_ids=digest_ids(cap.token_ids, entry.digest_key))
        if gold is not None and gold.digested and cap.answer is not None \
                and entry.digest_key is not None:  # compared as hashes under the file's key
            cap = replace(cap, answer=digest_answer(cap.answer, entry.digest_key))
            if entry.capture.token_ids is None and gold.choices and cap.answer is not None \
                    and cap.answer.choices:  # no ids (Responses): the text as its hash
                golden_cap = replace(golden_cap, text=gold.choices[0].content)
                cap = replace(cap, text=cap.answer.choices[0].content)
        out.append(compare(golden_cap, cap, meta, "baseline" if against == "baseline"
                           else "shadow", id_block))
    return out


def _ok(cap: Capture) -> bool:
    return cap.error is None and not cap.cancelled and cap.status is not None \
        and cap.status < 400 and cap.output_tokens is not None


def length_stats(golden: Sequence[Capture], new: Sequence[Capture]) -> LengthStats:
    """Paired output lengths: ratio of totals, Wilcoxon signed-rank, quantiles."""
    pairs = [(g.output_tokens or 0, n.output_tokens or 0)
             for g, n in zip(golden, new) if _ok(g) and _ok(n)]
    old = [p[0] for p in pairs]
    newl = [p[1] for p in pairs]
    diffs = [b - a for a, b in pairs]
    p_value = 1.0
    if any(diffs):
        from scipy.stats import wilcoxon  # lazy: heavy import

        p_value = float(wilcoxon(diffs).pvalue)
    return LengthStats(
        pairs=len(pairs), old_total=sum(old), new_total=sum(newl),
        ratio=sum(newl) / sum(old) if sum(old) else None,
        shorter=sum(d < 0 for d in diffs), longer=sum(d > 0 for d in diffs),
        wilcoxon_p=p_value,
        old_quantiles={f"p{q}": percentile(old, q) for q in (10, 50, 90)},
        new_quantiles={f"p{q}": percentile(newl, q) for q in (10, 50, 90)},
    )


def _check_lengths(stats: LengthStats, base: LengthStats | None,
                   c: CompareCriteria) -> Check:
    ratio = stats.ratio
    if ratio is None:
        return Check("lengths", "inconclusive", "no answer lengths to compare")
    noise = abs(base.ratio - 1) if base is not None and base.ratio is not None else 0.0
    limit = c.max_length_change + noise
    text = (f"new/old output tokens {ratio:.3f} over {stats.pairs} pairs "
            f"({stats.shorter} shorter, {stats.longer} longer; Wilcoxon signed-rank "
            f"p={stats.wilcoxon_p:.3g}); allowed change {limit:.3f}")
    if abs(ratio - 1) <= limit:
        return Check("lengths", "pass", text)
    if stats.wilcoxon_p < c.gate.alpha:
        return Check("lengths", "fail", text + ": " + ("shorter" if ratio < 1 else "longer"))
    return Check("lengths", "inconclusive", text + ": beyond it but not significant")


def finish_stats(golden: Sequence[Capture], new: Sequence[Capture]) -> FinishStats:
    pairs = [(g.finish_reason, n.finish_reason) for g, n in zip(golden, new)
             if _ok(g) and _ok(n)]
    changes = Counter(f"{a}->{b}" for a, b in pairs if a != b)
    return FinishStats(len(pairs), sum(changes.values()), dict(changes))


def _check_finish(stats: FinishStats, base: FinishStats | None, c: CompareCriteria) -> Check:
    n, k = stats.pairs, stats.changed
    if n == 0:
        return Check("finish_reasons", "inconclusive", "no answers to compare")
    noise = base.changed / base.pairs if base is not None and base.pairs else 0.0
    limit = min(1.0, c.max_finish_change + noise)
    low, _ = wilson_interval(k, n, c.gate.confidence)
    moves = ", ".join(f"{t} {v}" for t, v in sorted(stats.transitions.items())) or "none"
    text = f"finish reason changed in {k}/{n} ({moves}); limit {limit:.3f}"
    if low > limit:
        return Check("finish_reasons", "fail", text)
    if k / n <= limit:
        return Check("finish_reasons", "pass", text)
    return Check("finish_reasons", "inconclusive", text + " (above, not significant)")


def divergence_summary(cmps: Sequence[Comparison]) -> DivergenceSummary:
    positions = [c.first_divergence for c in cmps
                 if c.outcome == "diverged" and c.first_divergence is not None]
    return DivergenceSummary(len(positions), min(positions, default=None),
                             percentile([float(p) for p in positions], 50),
                             max(positions, default=None), positions[:MAX_LISTED])


def judge(golden: Sequence[GoldenEntry], new: Sequence[Capture],
          baseline: Sequence[Capture] | None, criteria: CompareCriteria) -> CompareResult:
    """The verdict and its evidence (`eval compare --json` prints it)."""
    old = [e.capture for e in golden]
    new_cmps = comparisons(golden, new, "shadow")
    base_cmps = comparisons(golden, baseline, "baseline") if baseline is not None else None
    counts = MatchCounts.of(new_cmps, "shadow")
    n = len(golden)
    inputs = GateInputs(
        new_vs_old=counts,
        baseline_vs_old=None if base_cmps is None else MatchCounts.of(base_cmps, "baseline"),
        requests={"primary": n, "shadow": n},
        errors={"primary": sum(not _ok(c) for c in old), "shadow": sum(not _ok(c) for c in new)})
    verdict = evaluate(inputs, criteria.gate)
    lengths = length_stats(old, new)
    base_lengths = None if baseline is None else length_stats(old, baseline)
    finish = finish_stats(old, new)
    base_finish = None if baseline is None else finish_stats(old, baseline)
    checks = [Check("gate", *_split(r)) for r in verdict.reasons]
    checks += [_check_lengths(lengths, base_lengths, criteria),
               _check_finish(finish, base_finish, criteria)]
    checks.sort(key=lambda c: _SEVERITY[c.status])
    low, high = wilson_interval(counts.matched, counts.compared, criteria.gate.confidence)
    base_counts = None if base_cmps is None else MatchCounts.of(base_cmps, "baseline")
    return CompareResult(
        verdict=checks[0].status,
        reasons=[f"{c.status}: {c.detail}" for c in checks],
        compared=counts.compared, diverged=counts.diverged, close=counts.close,
        match_rate=counts.match_rate, match_rate_ci=(low, high),
        first_divergence=divergence_summary(new_cmps),
        lengths=lengths, finish_reasons=finish,
        errors=dict(inputs.errors),
        baseline=None if base_counts is None or base_lengths is None or base_finish is None
        else BaselineSummary(base_counts.compared, base_counts.diverged, base_counts.close,
                             base_counts.match_rate, base_lengths, base_finish),
        gate=verdict.details.get("match"),
        requests=[_row(e, c, cap) for e, c, cap in zip(golden, new_cmps, new)][:MAX_LISTED],
    )


def _split(reason: str) -> tuple[VerdictName, str]:
    status, _, detail = reason.partition(": ")
    assert status in _SEVERITY
    return cast(VerdictName, status), detail


def _row(entry: GoldenEntry, cmp: Comparison, cap: Capture) -> RequestRow:
    return RequestRow(source=entry.request.source, outcome=cmp.outcome,
                      first_divergence=cmp.first_divergence, close=cmp.close_match,
                      old_tokens=entry.capture.output_tokens, new_tokens=cap.output_tokens,
                      old_finish=entry.capture.finish_reason, new_finish=cap.finish_reason,
                      reason=cmp.reason, field=cmp.field, choice=cmp.choice)
