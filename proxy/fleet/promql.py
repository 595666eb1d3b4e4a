"""Every PromQL expression the fleet gate, the recording rules and the Argo Rollouts
`prometheus` analysis use, built here and nowhere else.

A selector is the sidecars' series selector (`{job="vllm-cutover"}`); a window is a
Prometheus duration (`30m`): with one, counts are `increase()` over it (Prometheus
extrapolates to the window's edges, so they are estimates); without, they are the
counters as they stand (everything since each sidecar started: exact).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proxy.gate.tally import UNMIRRORABLE_REASONS

__all__ = ["SHED_REASONS", "FleetQueries", "Selector", "parse_selector", "parse_window"]

# The reasons `proxy.mirror.admission.Admission.shed` counts a sampled request as not
# mirrored (the admission tally the per-sidecar gate reads); the metric's other reasons
# (shadow_down, baseline_down) are not in its coverage either.
SHED_REASONS = ("inflight_cap", "overload", "worker_busy", "worker_down", "worker_lost")
DEFAULT_SELECTOR = '{job="vllm-cutover"}'
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')
_WINDOW = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")

COMPARISONS = "vllm_cutover_comparisons_total"
REQUESTS = "vllm_cutover_evidence_requests_total"
TTFT = "vllm_cutover_evidence_ttft_seconds_bucket"
TPOT = "vllm_cutover_evidence_tpot_seconds_bucket"
LENGTHS = "vllm_cutover_evidence_output_tokens_bucket"
# Unstreamed answers' E2E and E2E per completion token (never pooled with TTFT/TPOT).
E2E_UNSTREAMED = "vllm_cutover_evidence_e2e_unstreamed_seconds_bucket"
TPOT_UNSTREAMED = "vllm_cutover_evidence_tpot_unstreamed_seconds_bucket"
SAMPLED = "vllm_cutover_shadow_sampled_total"
DROPPED = "vllm_cutover_shadow_dropped_total"


@dataclass(frozen=True)
class Selector:
    """The label matchers inside `{...}` (may be empty)."""

    matchers: tuple[str, ...]

    def series(self, name: str, *extra: str) -> str:
        return f"{name}{{{','.join((*self.matchers, *extra))}}}"


def parse_selector(text: str) -> Selector:
    """`{job="vllm-cutover",namespace="llm"}` -> Selector; ValueError quoting a bad one."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise ValueError(f"--selector must look like {DEFAULT_SELECTOR}, got {text!r}")
    inner = inner[1:-1].strip()
    matchers: list[str] = []
    pos = 0
    while pos < len(inner):
        match = _MATCHER.match(inner, pos)
        if match is None:
            raise ValueError(f"--selector: cannot read a label matcher at {inner[pos:]!r} "
                             f"in {text!r} (expected name=\"value\", =~, != or !~)")
        matchers.append(match.group(0).strip())
        pos = match.end()
        if pos < len(inner):
            if inner[pos] != ",":
                raise ValueError(f"--selector: expected ',' at {inner[pos:]!r} in {text!r}")
            pos += 1
    return Selector(tuple(matchers))


def parse_window(text: str | None) -> str | None:
    """A Prometheus duration like 30m or 1h30m; ValueError quoting a bad one."""
    if text is None:
        return None
    if not _WINDOW.match(text):
        raise ValueError(f"--window must be a Prometheus duration like 30m or 1h, got {text!r}")
    return text


@dataclass(frozen=True)
class FleetQueries:
    """The queries of one fleet evaluation."""

    selector: Selector
    window: str | None = None

    def _counted(self, series: str) -> str:
        return f"increase({series}[{self.window}])" if self.window else series

    def _sum(self, by: str, name: str, *extra: str) -> str:
        return f"sum by ({by}) ({self._counted(self.selector.series(name, *extra))})"

    def targets(self) -> str:
        return self.selector.series("up")

    def comparisons(self) -> str:
        """Deterministic requests with a token verdict, per side and outcome."""
        return self._sum("against, outcome", COMPARISONS, 'deterministic="true"',
                         'outcome=~"match|diverged"')

    def requests(self) -> str:
        return self._sum("role, result", REQUESTS)

    def histogram(self, bucket_series: str) -> str:
        return self._sum("role, le", bucket_series)

    def sampled(self) -> str:
        return f"sum({self._counted(self.selector.series(SAMPLED))})"

    def shed(self) -> str:
        # With the unmirrorable ones, which the gate shows but does not hold against coverage.
        reasons = (*SHED_REASONS, *sorted(UNMIRRORABLE_REASONS))
        return self._sum("reason", DROPPED, f'reason=~"{"|".join(reasons)}"')
