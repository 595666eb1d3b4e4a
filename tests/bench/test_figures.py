"""Figures: percentiles as numpy computes them, relations to the reference, the table."""

from __future__ import annotations

import math

from _figures import Figure, percentile, render_table


def test_percentile_interpolates_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert math.isclose(percentile(values, 99), 3.97)
    assert math.isnan(percentile([], 50))


def test_relation_and_verdict_in_table() -> None:
    delta = Figure("latency", "added p50", 1.5, "ms", "nginx", 0.5, "delta", "<= 1 ms", False)
    ratio = Figure("throughput", "ev per CPU-s", 50_000.0, "ev/s", "nginx", 25_000.0, "ratio",
                   ">= 40000", True)
    info = Figure("memory", "fds", 12.0, "")
    assert delta.relation == 1.0 and ratio.relation == 2.0 and info.relation is None
    table = render_table([delta, ratio, info]).splitlines()
    assert "FAIL" in table[2] and "+1.000 ms" in table[2]
    assert "PASS" in table[3] and "x2.000" in table[3] and "50,000 ev/s" in table[3]
    assert table[4].rstrip().endswith("-")
