from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

from proxy.report.svg import Series, cdf_chart, histogram_chart, nice_ticks


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
