"""Figures of a benchmark run: each one with its rounds, same-run reference, target and verdict.

A figure's value is the median over the interleaved rounds; `rounds` keeps every round's
value (and `reference_rounds` the reference's), so the table shows the spread. A target
is judged round by round: PASS when every round meets it, FAIL only when no round does
(the whole spread is past it), "noise" when the spread straddles it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

Compare = Literal["delta", "ratio", ""]
Op = Literal["<=", ">=", ""]
Verdict = Literal["PASS", "FAIL", "noise", "-"]


@dataclass(frozen=True)
class Figure:
    """One measured number, compared with a reference measured in the same run.

    `op` and `limit` make it a target: `value op limit`, or, with `judge_relation`, the
    delta or ratio to the reference (per round where both have rounds) `op limit`.
    """

    scenario: str
    name: str
    value: float
    unit: str
    reference: str = ""
    reference_value: float | None = None
    compare: Compare = ""  # how value relates to the reference
    target: str = ""  # the target as the table shows it
    op: Op = ""
    limit: float = 0.0
    judge_relation: bool = False
    rounds: tuple[float, ...] = ()
    reference_rounds: tuple[float, ...] = ()

    @property
    def relation_rounds(self) -> tuple[float, ...]:
        """The delta or ratio to the reference in each round (rounds are paired)."""
        if not self.compare or not self.rounds or len(self.rounds) != len(self.reference_rounds):
            return ()
        return tuple(_relate(self.compare, v, r) for v, r in zip(self.rounds, self.reference_rounds))

    @property
    def relation(self) -> float | None:
        paired = self.relation_rounds
        if paired:
            return median(list(paired))
        if self.reference_value is None or not self.compare:
            return None
        return _relate(self.compare, self.value, self.reference_value)

    @property
    def judged(self) -> tuple[float, ...]:
        """What the target is checked on, one number per round."""
        if self.judge_relation:
            paired = self.relation_rounds
            if paired:
                return paired
            relation = self.relation
            return (relation if relation is not None else math.nan,)
        return self.rounds or (self.value,)

    @property
    def verdict(self) -> Verdict:
        if not self.op:
            return "-"
        met = [_meets(v, self.op, self.limit) for v in self.judged]
        if all(met):
            return "PASS"
        return "noise" if any(met) else "FAIL"

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["relation"] = self.relation
        out["relation_rounds"] = self.relation_rounds
        out["verdict"] = self.verdict
        return out


def figure(scenario: str, name: str, rounds: Sequence[float], unit: str, *,
           reference: str = "", reference_rounds: Sequence[float] = (), compare: Compare = "",
           target: str = "", op: Op = "", limit: float = 0.0,
           judge_relation: bool = False) -> Figure:
    """A figure from its per-round values (and its reference's): medians and spreads."""
    return Figure(
        scenario, name, median(rounds), unit, reference=reference,
        reference_value=median(reference_rounds) if reference_rounds else None,
        compare=compare, target=target, op=op, limit=limit, judge_relation=judge_relation,
        rounds=tuple(rounds), reference_rounds=tuple(reference_rounds),
    )


def _relate(compare: Compare, value: float, reference: float) -> float:
    if compare == "delta":
        return value - reference
    return value / reference if reference else math.nan


def _meets(value: float, op: Op, limit: float) -> bool:
    if math.isnan(value):
        return False
    return value <= limit if op == "<=" else value >= limit


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


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


def _spread(values: Sequence[float], fmt: str = "") -> str:
    """ [min..max] over rounds, in `fmt` (default: as `_num` writes values)."""
    clean = [v for v in values if not math.isnan(v)]
    if len(clean) < 2:
        return ""
    low, high = (format(v, fmt) if fmt else _num(v) for v in (min(clean), max(clean)))
    return f" [{low}..{high}]"


def _rel_text(fig: Figure) -> str:
    relation = fig.relation
    if relation is None:
        return ""
    if fig.compare == "ratio":
        return f"x{relation:.3f}" + _spread(fig.relation_rounds, ".3f")
    return f"{relation:+.3f} {fig.unit}".rstrip() + _spread(fig.relation_rounds, "+.3f")


def render_table(figures: Sequence[Figure]) -> str:
    """Plain text: figure, median [min..max over rounds], reference, delta or ratio, target,
    verdict."""
    header = ("scenario", "figure", "median [min..max]", "reference (same run)", "delta/ratio",
              "target", "")
    rows = [header]
    for fig in figures:
        value_text = _num(fig.value, fig.unit) + _spread(fig.rounds)
        ref_text = fig.reference
        if fig.reference and fig.reference_value is not None:
            ref_text = (f"{fig.reference} = {_num(fig.reference_value, fig.unit)}"
                        + _spread(fig.reference_rounds))
        rows.append((fig.scenario, fig.name, value_text, ref_text, _rel_text(fig), fig.target,
                     fig.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
