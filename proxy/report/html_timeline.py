"""The HTML report's "over time" section: the verdict re-judged at each look, and the match
rates and p50 ratios it read, against the time since the first record (inline SVG)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from proxy.report.model import METRIC_LABELS
from proxy.report.svg import COLORS, VERDICT_COLORS, Line, State, line_chart, state_chart
from proxy.report.timeline import Look, Timeline

RATIO_COLORS = {"ttft": "#1f77b4", "tpot": "#2ca02c", "e2e_unstreamed": "#9467bd",
                "tpot_unstreamed": "#8c564b"}
VERDICT_ORDER = ("pass", "inconclusive", "fail")  # top to bottom
# The match-rate axis covers at least this much (percent): noise of a few percent shows.
MATCH_RATE_SPAN = (95.0, 100.0)


def time_axis(looks: Sequence[Look]) -> tuple[str, list[float]]:
    """The x axis: time since the first record in s, min or h (whichever reads best);
    the records judged when they all started at once."""
    span_s = looks[-1].elapsed_s if looks else 0.0
    if span_s <= 0:
        return "records judged", [float(look.records) for look in looks]
    unit, size = next((u, s) for u, s in (("h", 3600.0), ("min", 60.0), ("s", 1.0))
                      if span_s >= 2 * s or s == 1.0)
    return f"time since the first record ({unit})", [look.elapsed_s / size for look in looks]


def _verdict_chart(looks: Sequence[Look], x_label: str, xs: Sequence[float]) -> str:
    states = [(name, VERDICT_COLORS[name]) for name in VERDICT_ORDER]
    dots = [State(x, look.verdict, "\n".join([f"after {look.records} records:",
                                               *look.deciding]))
            for x, look in zip(xs, looks)]
    return state_chart("Verdict, re-judged at each look", x_label, states, dots)


def _match_chart(looks: Sequence[Look], x_label: str, xs: Sequence[float]) -> str:
    new = [(x, look.match_rate * 100) for x, look in zip(xs, looks)
           if look.match_rate is not None]
    noise = [(x, look.baseline_match_rate * 100) for x, look in zip(xs, looks)
             if look.baseline_match_rate is not None]
    lines = [Line("new vs old", new, COLORS["shadow"]),
             Line("baseline vs old (noise)", noise, COLORS["baseline"], dashed=True)]
    return line_chart("Match rate, deterministic requests (cumulative)",
                      (x_label, "match rate (%)"), lines, y_include=MATCH_RATE_SPAN)


def _ratio_points(looks: Sequence[Look], xs: Sequence[float], metric: str,
                  baseline: bool) -> list[tuple[float, float]]:
    points = []
    for x, look in zip(xs, looks):
        value = (look.baseline_p50_ratios if baseline else look.p50_ratios).get(metric)
        if value is not None:
            points.append((x, value))
    return points


def _ratio_chart(timeline: Timeline, x_label: str, xs: Sequence[float]) -> str:
    lines = []
    for metric in timeline.ratio_metrics:
        label, color = METRIC_LABELS[metric], RATIO_COLORS[metric]
        lines += [Line(f"{label} p50 new / old", _ratio_points(timeline.looks, xs, metric, False),
                       color),
                  Line(f"{label} p50 baseline / old",
                       _ratio_points(timeline.looks, xs, metric, True), color, dashed=True)]
    limits = sorted({timeline.p50_limits[m] for m in timeline.ratio_metrics
                     if m in timeline.p50_limits})
    levels = [(f"gate limit {limit:g}x", limit) for limit in limits]
    return line_chart("p50 latency ratio (cumulative)", (x_label, "ratio"), lines,
                      levels=levels, y_include=[1.0])


def over_time_section(timeline: Timeline, verdict: str) -> str:
    """The section's HTML: a sentence on how the looks were taken, then the charts; a
    sentence alone without records."""
    looks = timeline.looks
    if not looks:
        return "<p>No records: nothing to judge over time.</p>"
    x_label, xs = time_axis(looks)
    last = looks[-1].verdict
    ending = ("the last look is the verdict above" if last == verdict else
              f"the last look ({last}) judged the records as read here, the verdict above "
              "the store's aggregates of them")
    intro = (f"The gate re-judged the records that had started by each of {len(looks)} "
             f"looks, evenly spaced by record count (cumulative: each look judges every "
             f"record before it); {ending}. Hover a point for its numbers.")
    charts = [_verdict_chart(looks, x_label, xs), _match_chart(looks, x_label, xs)]
    if timeline.ratio_metrics:
        charts.append(_ratio_chart(timeline, x_label, xs))
    return f'<p>{escape(intro)}</p>\n<div class="charts">{"".join(charts)}</div>'
