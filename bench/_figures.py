"""Figures of a benchmark run: each one with its same-run reference, target and verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figure:
    """One measured number, compared with a reference measured in the same run."""

    scenario: str
    name: str
    value: float
    unit: str
    reference: str = ""
    reference_value: float | None = None
    compare: str = ""  # how value relates to the reference: "delta", "ratio" or "" (none)
    target: str = ""
    passed: bool | None = None  # None: informative, no target

    @property
    def relation(self) -> float | None:
        if self.reference_value is None:
            return None
        if self.compare == "delta":
            return self.value - self.reference_value
        if self.compare == "ratio" and self.reference_value:
            return self.value / self.reference_value
        return None

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["relation"] = self.relation
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("PASS" if passed else "FAIL")


def _num(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3f}"
    return f"{text} {unit}".strip()


def render_table(figures: Sequence[Figure]) -> str:
    """A plain-text table: figure, value, reference, delta or ratio, target, verdict."""
    header = ("scenario", "figure", "value", "reference (same run)", "delta/ratio", "target", "")
    rows = [header]
    for fig in figures:
        relation = fig.relation
        if relation is None:
            rel_text = ""
        elif fig.compare == "ratio":
            rel_text = f"x{relation:.3f}"
        else:
            rel_text = f"{relation:+.3f} {fig.unit}"
        ref_text = fig.reference
        if fig.reference and fig.reference_value is not None:
            ref_text = f"{fig.reference} = {_num(fig.reference_value, fig.unit)}"
        rows.append(
            (
                fig.scenario,
                fig.name,
                _num(fig.value, fig.unit),
                ref_text,
                rel_text,
                fig.target,
                verdict(fig.passed),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
