"""The gate's criteria, the table of latency ratio limits, and how its error rate is spent.

`GateCriteria` is built once at the edge (CLI, admin API); the gate reads it. A promotion
needs every check to pass: an intersection-union test (Berger 1982). A version beyond
some limit is promoted only if that limit's check passes wrongly, so the pass side of
each check may spend the whole 1 - confidence (`pass_alpha`) and the verdict still
promotes such a version with probability at most 1 - confidence, at every look. An abort
needs only one check to fail: a union, so the fail side is split evenly over the checks
the criteria enable (`fail_alpha`, fixed before any data is seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["streamed", "unstreamed"]
Looks = Literal["continuous", "once"]


@dataclass(frozen=True)
class RatioLimit:
    """One latency ratio check: its criteria field, metric (`stats.METRICS`), quantile,
    traffic family, CLI flag and label."""

    field: str
    metric: str
    quantile: float
    family: Family
    flag: str
    label: str

    @property
    def per_token(self) -> bool:
        return self.metric.startswith("tpot")


_METRICS: tuple[tuple[str, Family, str], ...] = (
    ("ttft", "streamed", "TTFT"), ("tpot", "streamed", "TPOT"),
    ("e2e_unstreamed", "unstreamed", "E2E (unstreamed)"),
    ("tpot_unstreamed", "unstreamed", "per-token (unstreamed)"))
RATIO_LIMITS: tuple[RatioLimit, ...] = tuple(
    RatioLimit(f"max_{metric}_{stat}_ratio", metric, q, family,
               f"--gate-max-{metric.replace('_', '-')}-{stat}-ratio", f"{label} {stat}")
    for metric, family, label in _METRICS for stat, q in (("p50", 0.50), ("p99", 0.99)))


@dataclass(frozen=True)
class GateCriteria:
    """Configurable thresholds of the gate; built once at the edge (CLI or admin API)."""

    min_samples: int = 50
    min_baseline_samples: int = 50
    confidence: float = 0.95  # of the whole verdict, at every look
    max_excess_divergence: float = 0.05  # allowed match-rate drop below the baseline's
    min_match_rate: float = 0.90  # absolute threshold when there is no baseline
    require_baseline: bool = False
    close_counts_as_match: bool = False  # vLLM's own tests accept top-k-close divergences
    min_latency_samples: int = 30
    max_ttft_p50_ratio: float | None = 1.10
    max_ttft_p99_ratio: float | None = 1.25
    max_tpot_p50_ratio: float | None = 1.10
    max_tpot_p99_ratio: float | None = 1.25
    max_e2e_unstreamed_p50_ratio: float | None = 1.10
    # Off by default: an unstreamed answer's time grows with its length, so E2E's tail is the
    # tail of the length mix (volatile, not the engine's); the per-token p99 judges the tail.
    max_e2e_unstreamed_p99_ratio: float | None = None
    max_tpot_unstreamed_p50_ratio: float | None = 1.10
    max_tpot_unstreamed_p99_ratio: float | None = 1.25
    # A slowdown smaller than this is never a regression (Kayenta's "allowed increase"):
    # whole-request times (TTFT, unstreamed E2E) and per-token times.
    latency_floor_s: float = 0.005
    token_latency_floor_s: float = 0.001
    alpha: float = 0.05  # fixed-sample tests of `eval compare` (one look at a fixed set)
    max_error_rate_excess: float = 0.01
    max_length_shift: float | None = 0.3  # |P(new > old) - P(new < old)| of output lengths
    min_coverage: float = 0.5  # share of sampled requests mirrored (the rest shed under load)
    # "continuous": the live gate, looked at again and again (confidence sequences);
    # "once": one look at a fixed set (`eval compare`), fixed-sample intervals.
    looks: Looks = "continuous"

    def __post_init__(self) -> None:
        for name in ("confidence", "alpha"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be within (0, 1), got {value!r}")
        for name in ("max_excess_divergence", "min_match_rate", "max_error_rate_excess",
                     "max_length_shift", "min_coverage"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")
        for name in ("min_samples", "min_baseline_samples", "min_latency_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("latency_floor_s", "token_latency_floor_s"):
            if not 0 <= getattr(self, name) < 60:
                raise ValueError(f"{name} must be within [0, 60) s, got {getattr(self, name)!r}")
        for name, _metric, _stat, limit in self.ratio_limits():
            if limit <= 0:
                raise ValueError(f"{name} must be > 0, got {limit!r}")
        if self.looks not in ("continuous", "once"):
            raise ValueError(f"looks must be 'continuous' or 'once', got {self.looks!r}")

    def enabled_limits(self) -> list[tuple[RatioLimit, float]]:
        """Each latency ratio check the criteria enable, with its limit."""
        out = []
        for entry in RATIO_LIMITS:
            limit = getattr(self, entry.field)
            if limit is not None:
                out.append((entry, float(limit)))
        return out

    def ratio_limits(self) -> list[tuple[str, str, str, float]]:
        """(field name, metric, percentile, limit) for each enabled latency ratio limit."""
        return [(e.field, e.metric, e.label.rsplit(" ", 1)[1], limit)
                for e, limit in self.enabled_limits()]

    def checks(self) -> int:
        """The statistical checks: match rate, error rate, output lengths (when judged)
        and every enabled latency ratio."""
        return 2 + (self.max_length_shift is not None) + len(self.enabled_limits())

    def pass_alpha(self) -> float:
        """What each check's pass side may spend: all of 1 - confidence (a promotion
        needs every check to pass, so a wrong promotion needs the one check whose limit
        is crossed to pass wrongly)."""
        return 1 - self.confidence

    def fail_alpha(self) -> float:
        """Each check's share on the fail side: an abort needs any one check to fail, so
        1 - confidence is split evenly over the checks."""
        return (1 - self.confidence) / self.checks()
