"""Inline SVG charts (empirical CDFs and histograms) with no plotting library.

Each function returns one `<svg>` element as a string; the HTML report embeds
it directly so the file works offline and without JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 30, 44
# A CDF with more points than this is drawn from evenly spaced order statistics.
MAX_CDF_POINTS = 400


@dataclass(frozen=True)
class Series:
    """One line or bar group: a label, its values, a colour and a dash pattern."""

    label: str
    values: Sequence[float]
    color: str
    dashed: bool = False


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1-2-5 steps)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count)
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
    """A boxed legend in the plot's top- or bottom-right corner."""
    labels = [f"{s.label} (n={len(s.values)})" for s in series]
    width = 34 + 6.2 * max(len(label) for label in labels)
    height = 8 + 16 * len(series)
    x = WIDTH - RIGHT - width - 6
    y = HEIGHT - BOTTOM - height - 6 if bottom else TOP + 6
    parts = [
        (
            f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{height}" fill="#fff" '
            'fill-opacity="0.9" stroke="#ccc"/>'
        )
    ]
    for i, (s, label) in enumerate(zip(series, labels)):
        line_y = y + 12 + 16 * i
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(
            f'<line x1="{x + 6:.1f}" y1="{line_y - 4}" x2="{x + 24:.1f}" y2="{line_y - 4}" '
            f'stroke="{s.color}" stroke-width="2.5"{dash}/>'
            f'<text x="{x + 30:.1f}" y="{line_y}">{escape(label)}</text>'
        )
    return parts


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 60" width="{WIDTH}" '
        f'height="60"><text x="{WIDTH / 2}" y="34" text-anchor="middle">'
        f"{escape(title)}: no samples</text></svg>"
    )


def cdf_chart(title: str, x_label: str, series: Sequence[Series]) -> str:
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

    parts = _frame(
        title, x_label, "fraction of requests", (x_ticks, [0, 0.25, 0.5, 0.75, 1]), sx, sy
    )
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
    y_ticks = nice_ticks(0, max(max(c) for c in counts), 4)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x_end = nbins * width

    def sx(v: float) -> float:
        return LEFT + v / x_end * plot_w

    def sy(v: float) -> float:
        return TOP + (1 - v / y_ticks[-1]) * plot_h

    x_ticks = [t for t in nice_ticks(0, x_end, 6) if t <= x_end]
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
