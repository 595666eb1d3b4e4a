from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

from proxy.report.svg import (
    Line,
    Series,
    State,
    cdf_chart,
    histogram_chart,
    line_chart,
    nice_ticks,
    state_chart,
)


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    ticks = nice_ticks(0, 37)
    assert ticks[0] <= 0 and ticks[-1] >= 37
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert steps == {10.0}


def test_cdf_is_valid_svg_with_one_line_per_series() -> None:
    svg = cdf_chart(
        "TTFT <CDF>", "ms", [Series("old", [1, 2, 3], "#00f"), Series("new", [2, 4], "#f00")]
    )
    root = ET.fromstring(svg)
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    assert "TTFT &lt;CDF&gt;" in svg  # escaped
    ys = [float(p.split(",")[1]) for p in lines[0].get("points", "").split()]
    assert ys == sorted(ys, reverse=True)  # a CDF only goes up (SVG y goes down)


def test_histogram_counts_each_value_once() -> None:
    svg = histogram_chart("pos", "token", [Series("new", [0, 1, 1, 5, 40], "#f00")], bins=10)
    counts = [int(n) for n in re.findall(r": (\d+) at ", svg)]
    assert sum(counts) == 5
    ET.fromstring(svg)


def test_empty_series_say_so() -> None:
    assert "no samples" in cdf_chart("TTFT", "ms", [Series("old", [], "#000")])


def _y_tick_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]+)</text>', svg)


def test_histogram_counts_axis_reads_whole_requests() -> None:
    svg = histogram_chart("pos", "token", [Series("new", [0, 1, 1], "#f00"),
                                           Series("base", [2], "#777")])
    labels = _y_tick_labels(svg)
    assert labels and all(label.isdigit() for label in labels), labels
    assert nice_ticks(0, 2, 4) != nice_ticks(0, 2, 4, min_step=1) == [0, 1, 2]


def test_line_chart_draws_each_point_and_the_limit() -> None:
    svg = line_chart("ratio", ("s", "x"), [Line("new", [(0, 1.0), (5, 1.2), (9, 1.3)], "#f00"),
                                           Line("none yet", [], "#00f")],
                     levels=[("limit 1.1x", 1.1)])
    root = ET.fromstring(svg)
    assert len(root.findall("{http://www.w3.org/2000/svg}circle")) == 3
    assert "limit 1.1x" in svg and "none yet" not in svg  # an empty line has no legend entry
    assert "no samples" in line_chart("ratio", ("s", "x"), [Line("new", [], "#f00")])


def test_line_chart_legend_moves_off_the_lines() -> None:
    high = line_chart("t", ("s", "y"), [Line("a", [(0, 9.0), (10, 10.0)], "#f00")],
                      y_include=[0])
    low = line_chart("t", ("s", "y"), [Line("a", [(0, 0.0), (10, 1.0)], "#f00")],
                     y_include=[10])
    legend_y = [float(re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="\d+" '
                                 r'fill="#fff"', svg)[0]) for svg in (high, low)]
    assert legend_y[0] > legend_y[1]  # lines high: legend at the bottom; low: at the top


def test_state_chart_puts_each_look_in_its_band() -> None:
    states = [("pass", "#0f0"), ("inconclusive", "#fa0"), ("fail", "#f00")]
    svg = state_chart("verdict", "s", states, [State(1, "inconclusive", "a <b>"),
                                               State(2, "pass", "b"), State(3, "fail", "c")])
    root = ET.fromstring(svg)
    dots = root.findall("{http://www.w3.org/2000/svg}circle")
    assert [d.get("fill") for d in dots] == ["#fa0", "#0f0", "#f00"]
    ys = [float(d.get("cy", "0")) for d in dots]
    assert ys[1] < ys[0] < ys[2]  # pass on top, fail at the bottom
    assert "a &lt;b&gt;" in svg


def test_line_chart_makes_room_above_lines_that_fill_both_corners() -> None:
    svg = line_chart("t", ("s", "y"), [Line("high", [(0, 8.0), (10, 9.0)], "#f00"),
                                       Line("low", [(0, 0.0), (10, 1.0)], "#00f")])
    assert max(float(t) for t in _y_tick_labels(svg)) > 10  # the axis grew upwards
    legend_y = float(re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="\d+" '
                                r'fill="#fff"', svg)[0])
    assert legend_y < 100  # in the top corner, above the lines
