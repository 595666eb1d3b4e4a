"""Promotion-gate options shared by `proxy` (live gate) and `report` (offline verdict)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.gate.criteria import RatioLimit
    from proxy.gate.verdict import GateCriteria


def add_match_arguments(group: argparse._ArgumentGroup, min_samples: int) -> None:
    """The token-match rules, shared by the live gate and `eval compare`."""
    group.add_argument("--gate-min-samples", type=int, default=min_samples, metavar="N",
                       help="deterministic requests compared before a verdict (default %(default)s)")
    group.add_argument("--gate-max-excess-divergence", type=float, default=0.05, metavar="F",
                       help="allowed match-rate drop below the baseline's (default %(default)s)")
    group.add_argument("--gate-min-match-rate", type=float, default=0.90, metavar="F",
                       help="match rate needed without a baseline (default %(default)s)")
    group.add_argument("--gate-require-baseline", action="store_true",
                       help="no pass without old-vs-old noise measured on a baseline")


def add_gate_arguments(parser: argparse.ArgumentParser, title: str) -> None:
    from proxy.gate.verdict import GateCriteria

    defaults = GateCriteria()  # the flags' defaults are the criteria's own
    group = parser.add_argument_group(title)
    add_match_arguments(group, min_samples=50)
    group.add_argument("--gate-min-coverage", type=float, default=0.5, metavar="F",
                       help="share of sampled requests that must have been mirrored (not shed "
                            "under load) for a pass (default %(default)s)")
    for entry, limit in _ratio_limits(defaults):
        group.add_argument(entry.flag, type=float, default=limit, metavar="X", dest=entry.field,
                           help=f"largest new/old {entry.label} ratio: passes when its upper "
                                "bound is within, fails when its lower bound is beyond; "
                                "0: not judged (default %(default)s)")
    group.add_argument("--gate-latency-floor-ms", type=float, default=5.0, metavar="MS",
                       help="a TTFT or unstreamed E2E this much slower is never a regression, "
                            "whatever the ratio (default %(default)s)")
    group.add_argument("--gate-token-latency-floor-ms", type=float, default=1.0, metavar="MS",
                       help="the same for per-token times, TPOT (default %(default)s)")
    group.add_argument("--gate-max-error-rate-excess", type=float, metavar="F",
                       default=defaults.max_error_rate_excess,
                       help="new's error rate may exceed old's by this much: passes when "
                            "its upper bound is within (default %(default)s)")
    group.add_argument("--gate-max-length-shift", type=float, metavar="F",
                       default=defaults.max_length_shift or 0.0,
                       help="largest |P(new longer) - P(new shorter)| of output lengths; "
                            "0: not judged (default %(default)s)")
    group.add_argument("--gate-confidence", type=float, default=0.95, metavar="F",
                       help="confidence of the whole verdict at every look: the error rate "
                            "1 - F is split across the checks (default %(default)s)")


def gate_criteria(args: argparse.Namespace) -> GateCriteria:
    """Validated criteria; GateCriteria raises ValueError quoting a bad value."""
    from proxy.gate.criteria import RATIO_LIMITS
    from proxy.gate.verdict import GateCriteria

    ratios: dict[str, Any] = {entry.field: getattr(args, entry.field) or None
                              for entry in RATIO_LIMITS}
    return GateCriteria(
        min_samples=args.gate_min_samples,
        max_excess_divergence=args.gate_max_excess_divergence,
        min_match_rate=args.gate_min_match_rate,
        require_baseline=args.gate_require_baseline,
        min_coverage=args.gate_min_coverage,
        latency_floor_s=args.gate_latency_floor_ms / 1000,
        token_latency_floor_s=args.gate_token_latency_floor_ms / 1000,
        confidence=args.gate_confidence,
        max_error_rate_excess=args.gate_max_error_rate_excess,
        max_length_shift=args.gate_max_length_shift or None,
        **ratios,
    )


def _ratio_limits(defaults: GateCriteria) -> list[tuple[RatioLimit, float]]:
    """Every latency ratio limit (`criteria.RATIO_LIMITS` names them) with its default;
    0 where the default criteria leave it off (unstreamed E2E p99), so it can be asked for."""
    from proxy.gate.criteria import RATIO_LIMITS

    return [(entry, float(getattr(defaults, entry.field) or 0)) for entry in RATIO_LIMITS]


def match_criteria(args: argparse.Namespace, base: GateCriteria, **more: Any) -> GateCriteria:
    """`base` with the token-match options of `add_match_arguments` (ValueError quoting)."""
    from dataclasses import replace

    return replace(base, min_samples=args.gate_min_samples,
                   min_baseline_samples=min(base.min_baseline_samples, args.gate_min_samples),
                   max_excess_divergence=args.gate_max_excess_divergence,
                   min_match_rate=args.gate_min_match_rate,
                   require_baseline=args.gate_require_baseline, **more)
