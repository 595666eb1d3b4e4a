"""Aggregates the gate reads: comparison counts, samples, requests and errors per role (no I/O).

Built in memory by the mirror or from stored records by the report (`GateInputs.from_records`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.compare.stats import LatencySamples
from proxy.compare.types import Comparison, ExchangeRecord, Role


@dataclass(frozen=True)
class MatchCounts:
    """Deterministic requests compared (match or diverged), how many diverged, how many of
    those were still close by vLLM's top-k rule."""

    compared: int = 0
    diverged: int = 0
    close: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.close <= self.diverged <= self.compared:
            raise ValueError("need 0 <= close <= diverged <= compared, got "
                             f"{self.close!r}/{self.diverged!r}/{self.compared!r}")

    @property
    def matched(self) -> int:
        return self.compared - self.diverged

    def counting_close_as_match(self) -> MatchCounts:
        return MatchCounts(self.compared, self.diverged - self.close, 0)

    @property
    def match_rate(self) -> float | None:
        return self.matched / self.compared if self.compared else None

    @classmethod
    def of(cls, comparisons: Iterable[Comparison], against: Role = "shadow") -> MatchCounts:
        compared = diverged = close = 0
        for comparison in comparisons:
            if comparison.against == against and comparison.outcome in ("match", "diverged"):
                compared += 1
                if comparison.outcome == "diverged":
                    diverged += 1
                    close += comparison.close_match is True
        return cls(compared, diverged, close)


@dataclass(frozen=True)
class GateInputs:
    """Aggregates the gate judges; latency/requests/errors are keyed by role."""

    new_vs_old: MatchCounts
    baseline_vs_old: MatchCounts | None = None
    latency: Mapping[str, LatencySamples] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: Iterable[ExchangeRecord]) -> GateInputs:
        """Aggregate stored or in-memory exchange records."""
        comparisons: list[Comparison] = []
        captures: dict[str, list[Any]] = {}
        requests: dict[str, int] = {}
        errors: dict[str, int] = {}
        has_baseline = False
        for record in records:
            comparisons.extend(record.comparisons)
            for cap in record.captures:
                if cap.cancelled:
                    continue
                has_baseline = has_baseline or cap.role == "baseline"
                captures.setdefault(cap.role, []).append(cap)
                requests[cap.role] = requests.get(cap.role, 0) + 1
                failed = cap.error is not None or cap.status is None or cap.status >= 400
                errors[cap.role] = errors.get(cap.role, 0) + failed
        return cls(
            new_vs_old=MatchCounts.of(comparisons, "shadow"),
            baseline_vs_old=MatchCounts.of(comparisons, "baseline") if has_baseline else None,
            latency={role: LatencySamples.from_captures(caps) for role, caps in captures.items()},
            requests=requests,
            errors=errors,
        )
