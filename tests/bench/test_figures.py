"""Figures: percentiles as numpy computes them, medians and spreads over rounds, verdicts."""

from __future__ import annotations

import math

from _figures import Figure, figure, percentile, render_table


def test_percentile_interpolates_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert math.isclose(percentile(values, 99), 3.97)
    assert math.isnan(percentile([], 50))


def test_a_target_is_missed_only_when_every_round_is_past_it() -> None:
    def judged(rounds: list[float]) -> str:
        return figure("latency", "added p50", rounds, "ms", op="<=", limit=1.0).verdict

    assert judged([0.4, 0.9, 1.0]) == "PASS"
    assert judged([0.4, 1.3, 0.8]) == "noise"  # the median meets it, one round does not
    assert judged([1.4, 0.9, 1.6]) == "noise"  # the median misses it, one round meets it
    assert judged([1.1, 1.3, 2.0]) == "FAIL"
    assert judged([math.nan, math.nan]) == "FAIL"
    assert figure("memory", "fds", [3.0, 4.0], "").verdict == "-"


def test_relation_targets_pair_the_rounds() -> None:
    # Round by round the proxy is ahead of the peer twice and behind once: within noise,
    # though the medians alone (1.0 vs 1.1) would say it is ahead.
    fig = figure("paced", "ev per CPU-s vs peer", [1.0, 2.0, 0.5], "ev/s", reference="peer",
                 reference_rounds=[0.9, 1.1, 1.0], compare="ratio", target=">= peer",
                 op=">=", limit=1.0, judge_relation=True)
    assert fig.value == 1.0 and fig.reference_value == 1.0
    assert fig.relation_rounds == (1.0 / 0.9, 2.0 / 1.1, 0.5)
    assert fig.relation == 1.0 / 0.9  # the median of the per-round ratios
    assert fig.verdict == "noise"
    ahead = figure("latency", "p50 vs peer", [0.5, 0.6, 0.7], "ms", reference="peer",
                   reference_rounds=[0.9, 1.0, 0.8], compare="delta", op="<=", limit=0.0,
                   judge_relation=True)
    assert ahead.verdict == "PASS" and math.isclose(ahead.relation or 0.0, -0.4)


def test_table_shows_median_spread_relation_and_verdict() -> None:
    delta = figure("latency", "added p50", [1.5, 1.2, 1.9], "ms", reference="nginx",
                   reference_rounds=[0.5, 0.4, 0.6], compare="delta", target="<= 1 ms",
                   op="<=", limit=1.0)
    single = Figure("throughput", "ev per CPU-s", 50_000.0, "ev/s", "nginx", 25_000.0, "ratio",
                    ">= 40000", ">=", 40_000.0)
    info = Figure("memory", "fds", 12.0, "")
    table = render_table([delta, single, info]).splitlines()
    assert "1.500 ms [1.200..1.900]" in table[2] and "nginx = 0.500 ms [0.400..0.600]" in table[2]
    assert "+1.000 ms [+0.800..+1.300]" in table[2] and table[2].endswith("FAIL")
    assert "x2.000" in table[3] and "50,000 ev/s" in table[3] and table[3].endswith("PASS")
    wide = figure("paced", "ev per CPU-s", [12_000.0, 15_500.0, 9_800.0], "ev/s")
    assert "12,000 ev/s [9,800..15,500]" in render_table([wide])
    assert table[4].rstrip().endswith("-")
