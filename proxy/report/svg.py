"""Inline SVG charts (empirical CDFs, histograms, lines over time) with no plotting library.

Each function returns one `<svg>` element as a string; the HTML report embeds
it directly so the file works offline and without JavaScript.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 30, 44
# A CDF with more points than this is drawn from evenly spaced order statistics.
MAX_CDF_POINTS = 400
# The report's palette: old, new and the baseline (old's second copy); the verdicts.
COLORS = {"primary": "#1f77b4", "shadow": "#ff7f0e", "baseline": "#7f7f7f"}
VERDICT_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#b26a00"}


@dataclass(frozen=True)
class Series:
    """One line or bar group: a label, its values, a colour and a dash pattern."""

    label: str
    values: Sequence[float]
    color: str
    dashed: bool = False


def nice_ticks(low: float, high: float, count: int = 5, min_step: float = 0.0) -> list[float]:
    """Round tick values covering [low, high] (1-2-5 steps, none finer than `min_step`:
    1 for counts, so an axis never reads "1.5 requests")."""
    if high <= low:
        high = low + 1.0
    raw = max((high - low) / max(1, count), min_step)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks: list[float] = []
    value = first
    while len(ticks) < 50:
        ticks.append(round(value, 12))
        if value >= high - step * 1e-9:
            break
        value += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.3g}"


Scale = Callable[[float], float]


def _frame(
    title: str,
    x_label: str,
    y_label: str,
    ticks: tuple[list[float], list[float]],
    sx: Scale,
    sy: Scale,
) -> list[str]:
    x_ticks, y_ticks = ticks
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">'
        ),
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" class="title">{escape(title)}</text>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>',
        (
            f'<text x="14" y="{HEIGHT / 2}" text-anchor="middle" '
            f'transform="rotate(-90 14 {HEIGHT / 2})">{escape(y_label)}</text>'
        ),
    ]
    for t in x_ticks:
        x = sx(t)
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" class="grid"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{_fmt(t)}</text>'
        )
    for t in y_ticks:
        y = sy(t)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    parts.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
        f'height="{HEIGHT - TOP - BOTTOM}" class="axes"/>'
    )
    return parts


def _legend(series: Sequence[Series], bottom: bool) -> list[str]:
    """A boxed legend of sample series, with their sizes."""
    return _legend_box([(f"{s.label} (n={len(s.values)})", s.color, s.dashed) for s in series],
                       bottom)


def _legend_rect(entries: Sequence[tuple[str, str, bool]],
                 bottom: bool) -> tuple[float, float, float, float]:
    """Where `_legend_box` draws: x, y, width, height."""
    width = 34 + 6.2 * max(len(label) for label, _, _ in entries)
    height = 8 + 16 * len(entries)
    y = HEIGHT - BOTTOM - height - 6 if bottom else TOP + 6
    return WIDTH - RIGHT - width - 6, y, width, height


def _legend_box(entries: Sequence[tuple[str, str, bool]], bottom: bool) -> list[str]:
    """A boxed legend of (label, colour, dashed) in the plot's top- or bottom-right corner."""
    x, y, width, height = _legend_rect(entries, bottom)
    parts = [
        (
            f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{height}" fill="#fff" '
            'fill-opacity="0.9" stroke="#ccc"/>'
        )
    ]
    for i, (label, color, dashed) in enumerate(entries):
        line_y = y + 12 + 16 * i
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        parts.append(
            f'<line x1="{x + 6:.1f}" y1="{line_y - 4}" x2="{x + 24:.1f}" y2="{line_y - 4}" '
            f'stroke="{color}" stroke-width="2.5"{dash}/>'
            f'<text x="{x + 30:.1f}" y="{line_y}">{escape(label)}</text>'
        )
    return parts


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 60" width="{WIDTH}" '
        f'height="60"><text x="{WIDTH / 2}" y="34" text-anchor="middle">'
        f"{escape(title)}: no samples</text></svg>"
    )


def cdf_chart(title: str, x_label: str, series: Sequence[Series],
              y_label: str = "fraction of requests") -> str:
    """Empirical CDFs of each series on one linear axis."""
    drawn = [s for s in series if s.values]
    if not drawn:
        return _empty(title)
    low = min(min(s.values) for s in drawn)
    high = max(max(s.values) for s in drawn)
    x_ticks = nice_ticks(min(0.0, low), high)
    x0, x1 = x_ticks[0], x_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(v: float) -> float:
        return LEFT + (v - x0) / (x1 - x0) * plot_w

    def sy(p: float) -> float:
        return TOP + (1 - p) * plot_h

    parts = _frame(title, x_label, y_label, (x_ticks, [0, 0.25, 0.5, 0.75, 1]), sx, sy)
    for s in drawn:
        ordered = sorted(s.values)
        n = len(ordered)
        step = max(1, n // MAX_CDF_POINTS)
        points = [f"{sx(ordered[0]):.1f},{sy(0):.1f}"]
        for i in range(0, n, step):
            points.append(f"{sx(ordered[i]):.1f},{sy(i / n):.1f}")
            points.append(f"{sx(ordered[i]):.1f},{sy(min(n, i + step) / n):.1f}")
        points.append(f"{sx(ordered[-1]):.1f},{sy(1):.1f}")
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(
            f'<polyline fill="none" stroke="{s.color}" stroke-width="2"{dash} '
            f'points="{" ".join(points)}"/>'
        )
    parts += _legend(drawn, bottom=True)
    parts.append("</svg>")
    return "\n".join(parts)


def histogram_chart(title: str, x_label: str, series: Sequence[Series], bins: int = 20) -> str:
    """Side-by-side bars of integer positions, shared bins across series."""
    drawn = [s for s in series if s.values]
    if not drawn:
        return _empty(title)
    high = max(max(s.values) for s in drawn)
    width = max(1, math.ceil((high + 1) / bins))
    nbins = int(high // width) + 1
    counts = []
    for s in drawn:
        c = [0] * nbins
        for v in s.values:
            c[int(v // width)] += 1
        counts.append(c)
    # Room above the tallest bar for the legend in the top corner.
    y_ticks = nice_ticks(0, 1.35 * max(max(c) for c in counts), 4, min_step=1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x_end = nbins * width

    def sx(v: float) -> float:
        return LEFT + v / x_end * plot_w

    def sy(v: float) -> float:
        return TOP + (1 - v / y_ticks[-1]) * plot_h

    x_ticks = [t for t in nice_ticks(0, x_end, 6, min_step=1) if t <= x_end]
    parts = _frame(title, x_label, "requests", (x_ticks, y_ticks), sx, sy)
    bar_w = plot_w / nbins / len(drawn)
    for k, (s, c) in enumerate(zip(drawn, counts)):
        for b, count in enumerate(c):
            if count:
                x = sx(b * width) + k * bar_w
                y = sy(count)
                parts.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(1.0, bar_w - 1):.1f}" '
                    f'height="{sy(0) - y:.1f}" fill="{s.color}"><title>{escape(s.label)}: '
                    f"{count} at {b * width}..{(b + 1) * width - 1}</title></rect>"
                )
    parts += _legend(drawn, bottom=False)
    parts.append("</svg>")
    return "\n".join(parts)


@dataclass(frozen=True)
class Line:
    """One curve of (x, y) points, drawn with a marker at each point."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dashed: bool = False


def _linear(ticks: list[float], start: float, length: float, flip: bool = False) -> Scale:
    low, high = ticks[0], ticks[-1]

    def scale(v: float) -> float:
        share = (v - low) / (high - low)
        return start + (1 - share if flip else share) * length

    return scale


def _hidden(entries: Sequence[tuple[str, str, bool]], bottom: bool,
            paths: Sequence[Sequence[tuple[float, float]]]) -> int:
    """How many points along `paths` (in pixels) a legend box there would cover."""
    x, y, width, height = _legend_rect(entries, bottom)
    covered = 0
    for path in paths:
        for (x0, y0), (x1, y1) in itertools.pairwise(path):
            steps = max(1, int(math.hypot(x1 - x0, y1 - y0) / 4))  # every 4 px or so
            for k in range(steps + 1):
                px, py = x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps
                covered += x <= px <= x + width and y <= py <= y + height
    return covered


def _legend_place(entries: Sequence[tuple[str, str, bool]],
                  lines: Sequence[Line], sx: Scale, y_span: tuple[float, float],
                  ) -> tuple[bool, list[float]] | None:
    """(bottom?, y ticks) for a legend that hides none of `lines` over `y_span`; None when
    both corners would hide some."""
    y_ticks = nice_ticks(*y_span, 4)
    sy = _linear(y_ticks, TOP, HEIGHT - TOP - BOTTOM, flip=True)
    paths = [[(sx(x), sy(y)) for x, y in line.points] for line in lines]
    for bottom in (True, False):
        if not _hidden(entries, bottom, paths):
            return bottom, y_ticks
    return None


def line_chart(title: str, labels: tuple[str, str], lines: Sequence[Line],
               levels: Sequence[tuple[str, float]] = (), y_include: Sequence[float] = ()) -> str:
    """Lines over a linear x axis (`labels`: the x and y axis names); `levels` are
    labelled horizontal reference lines (a limit), `y_include` values the y axis covers.
    The legend goes to a right corner, bottom or top, where it hides no line; where both
    would, the y axis grows upwards to make room above the lines."""
    drawn = [line for line in lines if line.points]
    if not drawn:
        return _empty(title)
    xs = [x for line in drawn for x, _ in line.points]
    ys = [y for line in drawn for _, y in line.points] + [v for _, v in levels] + [*y_include]
    x_ticks = nice_ticks(min(0.0, min(xs)), max(xs))
    sx = _linear(x_ticks, LEFT, WIDTH - LEFT - RIGHT)
    headroom = 0.08 * (max(ys) - min(ys)) if levels else 0.0  # a level's label above it
    entries = [(line.label, line.color, line.dashed) for line in drawn]
    low, high = min(ys), max(ys) + headroom
    place = _legend_place(entries, drawn, sx, (low, high))
    if place is None:  # the lines keep below the legend's share of the height (and a gap)
        share = (_legend_rect(entries, False)[3] + 12) / (HEIGHT - TOP - BOTTOM)
        place = False, nice_ticks(low, low + (high - low) / (1 - share), 4)
    bottom, y_ticks = place
    sy = _linear(y_ticks, TOP, HEIGHT - TOP - BOTTOM, flip=True)
    parts = _frame(title, *labels, (x_ticks, y_ticks), sx, sy)
    for label, value in levels:
        y = sy(value)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
            'stroke="#c62828" stroke-dasharray="2 3"/>'
            f'<text x="{LEFT + 4}" y="{y - 4:.1f}" fill="#c62828">{escape(label)}</text>'
        )
    for line in drawn:
        dash = ' stroke-dasharray="5 3"' if line.dashed else ""
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line.points)
        parts.append(f'<polyline fill="none" stroke="{line.color}" stroke-width="2"{dash} '
                     f'points="{points}"/>')
        parts += [
            f'<circle class="point" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" '
            f'fill="{line.color}"><title>{escape(line.label)}: {y:.4g} at {x:.4g}</title></circle>'
            for x, y in line.points
        ]
    parts += _legend_box(entries, bottom)
    parts.append("</svg>")
    return "\n".join(parts)


@dataclass(frozen=True)
class State:
    """One look at a state over time: where (x), which state, and a note for its tooltip."""

    x: float
    state: str
    note: str


def state_chart(title: str, x_label: str, states: Sequence[tuple[str, str]],
                looks: Sequence[State]) -> str:
    """Each look as a dot in the band of its state (`states`: (name, colour), top first),
    joined by steps, so a verdict that changes reads as a staircase."""
    if not looks:
        return _empty(title)
    x_ticks = nice_ticks(min(0.0, min(look.x for look in looks)), max(look.x for look in looks))
    sx = _linear(x_ticks, LEFT, WIDTH - LEFT - RIGHT)
    band = (HEIGHT - TOP - BOTTOM) / len(states)
    row = {name: i for i, (name, _) in enumerate(states)}
    color = dict(states)

    def y_of(state: str) -> float:
        return TOP + (row[state] + 0.5) * band

    parts = _frame(title, x_label, "", (x_ticks, []), sx, sx)  # no y ticks: bands
    for i, (name, fill) in enumerate(states):
        parts.append(
            f'<rect x="{LEFT}" y="{TOP + i * band:.1f}" width="{WIDTH - LEFT - RIGHT}" '
            f'height="{band:.1f}" fill="{fill}" fill-opacity="0.08"/>'
            f'<text x="{LEFT + 6}" y="{TOP + i * band + 14:.1f}" fill="{fill}">{escape(name)}</text>'
        )
    steps = [f"{sx(looks[0].x):.1f},{y_of(looks[0].state):.1f}"]
    for before, look in itertools.pairwise(looks):
        steps.append(f"{sx(look.x):.1f},{y_of(before.state):.1f}")
        steps.append(f"{sx(look.x):.1f},{y_of(look.state):.1f}")
    parts.append(f'<polyline fill="none" stroke="#999" stroke-width="1.5" '
                 f'points="{" ".join(steps)}"/>')
    parts += [
        f'<circle class="look" cx="{sx(look.x):.1f}" cy="{y_of(look.state):.1f}" r="5" '
        f'fill="{color[look.state]}"><title>{escape(look.note)}</title></circle>'
        for look in looks
    ]
    parts.append("</svg>")
    return "\n".join(parts)
