"""Aggregates the gate reads: comparison counts, samples, requests and errors per role, and
how many sampled requests were mirrored at all (no I/O).

Built in memory by the mirror or from stored records by the report (`GateInputs.from_records`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# An admission count: (primary URL, shadow URL, outcome, count); outcome is ELIGIBLE (the
# sampler chose the request) or the reason an eligible request was not mirrored.
AdmissionRow = tuple[str, str, str, int]
ELIGIBLE = "eligible"

from proxy.compare.request import STATEFUL_KEYS
from proxy.compare.stats import LatencySamples
from proxy.compare.types import Capture, Comparison, ExchangeRecord, Role


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


# Shed reasons that are not load: requests continuing server-side state (`STATEFUL_KEYS`).
UNMIRRORABLE_REASONS = frozenset(reason for _, reason in STATEFUL_KEYS)


@dataclass(frozen=True)
class AdmissionCounts:
    """Requests the sampler chose (eligible) and those shed unmirrored, per reason."""

    eligible: int = 0
    shed: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, int]]) -> AdmissionCounts:
        """From (outcome, count) pairs."""
        eligible, shed = 0, dict[str, int]()
        for outcome, count in rows:
            if outcome == ELIGIBLE:
                eligible += count
            elif count:
                shed[outcome] = shed.get(outcome, 0) + count
        return cls(eligible, dict(sorted(shed.items(), key=lambda kv: (-kv[1], kv[0]))))

    @property
    def shed_total(self) -> int:
        return sum(self.shed.values())

    @property
    def mirrored(self) -> int:
        return max(0, self.eligible - self.shed_total)

    @property
    def unmirrorable(self) -> int:
        """Requests no shadow could answer (Responses-API state it does not have)."""
        return sum(n for reason, n in self.shed.items() if reason in UNMIRRORABLE_REASONS)

    @property
    def coverage(self) -> float | None:
        """Share of the mirrorable eligible requests that were mirrored (None before any).
        Unmirrorable ones are shown, not held against it: coverage is about shedding under
        load, and a multi-turn Responses client would otherwise never let a cutover pass."""
        mirrorable = self.eligible - self.unmirrorable
        return self.mirrored / mirrorable if mirrorable > 0 else None

    def shed_text(self) -> str:
        """"overload 30, worker_busy 9" (most first)."""
        return ", ".join(f"{reason} {n}" for reason, n in self.shed.items())

    def as_json(self) -> dict[str, Any]:
        coverage = self.coverage
        return {"eligible": self.eligible, "mirrored": self.mirrored,
                "shed": dict(self.shed), "shed_total": self.shed_total,
                "unmirrorable": self.unmirrorable,
                "coverage": coverage, "drop_rate": None if coverage is None else 1 - coverage}


@dataclass(frozen=True)
class GateInputs:
    """Aggregates the gate judges; latency/requests/errors are keyed by role."""

    new_vs_old: MatchCounts
    baseline_vs_old: MatchCounts | None = None
    latency: Mapping[str, LatencySamples] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    admission: AdmissionCounts | None = None  # None: not counted (records from elsewhere)

    @classmethod
    def from_records(cls, records: Iterable[ExchangeRecord]) -> GateInputs:
        """Aggregate stored or in-memory exchange records."""
        comparisons: list[Comparison] = []
        counted: list[tuple[ExchangeRecord, Capture]] = []
        requests: dict[str, int] = {}
        errors: dict[str, int] = {}
        has_baseline = False
        for record in records:
            comparisons.extend(record.comparisons)
            for cap in record.captures:
                if cap.cancelled:
                    continue
                has_baseline = has_baseline or cap.role == "baseline"
                counted.append((record, cap))
                requests[cap.role] = requests.get(cap.role, 0) + 1
                failed = cap.error is not None or cap.status is None or cap.status >= 400
                errors[cap.role] = errors.get(cap.role, 0) + failed
        return cls(
            new_vs_old=MatchCounts.of(comparisons, "shadow"),
            baseline_vs_old=MatchCounts.of(comparisons, "baseline") if has_baseline else None,
            latency=latency_by_role(counted),
            requests=requests,
            errors=errors,
        )


LatencyKind = Literal["streamed", "unstreamed", "neither"]
LATENCY_KINDS: tuple[LatencyKind, ...] = ("streamed", "unstreamed", "neither")


def latency_kind(record: ExchangeRecord, cap: Capture) -> LatencyKind:
    """Which latency family `cap`'s timing belongs to: a streamed answer, an unstreamed
    answer to an unstreamed request, or "neither": the baseline asked unstreamed for a
    streamed request (the default, without --baseline-stream). Its E2E is of requests the
    clients streamed, so it is not like the shadow's unstreamed E2E; counted as such, it
    made the unstreamed family look present in purely streamed traffic and the gate wait
    for shadow samples that never come. Its tokens and length still count."""
    if not record.meta.stream:
        return "unstreamed"
    if cap.role == "baseline" and not record.extra.get("baseline_streamed", True):
        return "neither"
    return "streamed"


def latency_by_role(captures: Iterable[tuple[ExchangeRecord, Capture]]
                    ) -> dict[str, LatencySamples]:
    """Per-role latency samples, each capture in its `latency_kind` (never pooled)."""
    by_role: dict[str, tuple[list[Capture], list[Capture], list[Capture]]] = {}
    for record, cap in captures:
        by_role.setdefault(cap.role, ([], [], []))[
            LATENCY_KINDS.index(latency_kind(record, cap))].append(cap)
    return {role: LatencySamples.from_captures(*caps) for role, caps in by_role.items()}
