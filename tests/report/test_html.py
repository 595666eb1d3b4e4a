from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from proxy.compare.types import ExchangeRecord
from proxy.report.html import render_html
from proxy.report.model import build_report
from proxy.report.timeline import MAX_LOOKS

Records = Callable[..., list[ExchangeRecord]]


def _svgs(html: str) -> dict[str, str]:
    """Each chart by its title."""
    return {m.group(1): m.group(0) for m in re.finditer(
        r'<svg[^>]*aria-label="([^"]*)".*?</svg>', html, re.DOTALL)}


def _headings_only_tables(html: str) -> list[str]:
    return [t for t in re.findall(r"<table>.*?</table>", html, re.DOTALL) if "<td" not in t]


def test_html_is_self_contained_with_plots_and_verdict(records_of: Records) -> None:
    html = render_html(build_report(records_of(count=600, diverge_every=4, new_slowdown=1.3)))
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html and not re.search(r"(src|href)=\"https?:", html)
    assert set(_svgs(html)) == {
        "Verdict, re-judged at each look", "Match rate, deterministic requests (cumulative)",
        "p50 latency ratio (cumulative)", "First divergence positions",
        "TTFT CDF", "TPOT CDF", "ITL CDF", "E2E latency CDF"}
    assert html.count("<svg") == 8
    assert "FAIL" in html and "baseline vs old (noise)" in html
    assert not _headings_only_tables(html)


def test_the_verdict_over_time_has_one_point_per_look(records_of: Records) -> None:
    charts = _svgs(render_html(build_report(records_of(count=600, new_slowdown=1.3))))
    verdicts = charts["Verdict, re-judged at each look"]
    assert verdicts.count('<circle class="look"') == MAX_LOOKS
    assert "after 600 records:\nfail: TTFT p50" in verdicts  # the last look, hovered
    match = charts["Match rate, deterministic requests (cumulative)"]
    assert match.count('<circle class="point"') == 2 * MAX_LOOKS  # new and baseline
    ratios = charts["p50 latency ratio (cumulative)"]
    assert ratios.count('<circle class="point"') == 4 * MAX_LOOKS  # TTFT, TPOT; new, baseline
    assert "gate limit 1.1x" in ratios and "time since the first record (min)" in ratios
    few = _svgs(render_html(build_report(records_of(count=5))))
    assert few["Verdict, re-judged at each look"].count('<circle class="look"') == 5


def test_baseline_curves_only_where_records_have_baseline_timings(records_of: Records) -> None:
    cdfs = ("TTFT CDF", "TPOT CDF", "ITL CDF", "E2E latency CDF")
    with_baseline = _svgs(render_html(build_report(records_of(count=60))))
    for title in cdfs:
        assert "baseline (old copy)" in with_baseline[title], title
        assert with_baseline[title].count("<polyline") == 3
    assert "baseline vs old (noise)" in with_baseline[
        "Match rate, deterministic requests (cumulative)"]
    without = _svgs(render_html(build_report(records_of(count=60, baseline=False))))
    for title in cdfs:
        assert "baseline" not in without[title] and without[title].count("<polyline") == 2
    assert "baseline" not in without["Match rate, deterministic requests (cumulative)"]


def test_unstreamed_only_traffic_charts_its_own_latency_and_rows(records_of: Records) -> None:
    records = [replace(r, meta=replace(r.meta, stream=False)) for r in records_of(count=60)]
    html = render_html(build_report(records))
    charts = _svgs(html)
    assert "TPOT CDF (unstreamed answers)" in charts
    assert "E2E latency CDF (unstreamed answers)" in charts
    assert "TTFT CDF" not in charts and "ITL CDF" not in charts
    assert "No TTFT, ITL recorded (no streamed answer)." in html
    assert "E2E (unstreamed) p50 new / old" in charts["p50 latency ratio (cumulative)"]
    assert "E2E (unstreamed)" in html and "TPOT (unstreamed)" in html
    assert "<td>TTFT</td>" not in html  # no row of dashes
    streamed = render_html(build_report(records_of(count=60)))
    assert "unstreamed" not in streamed


def test_empty_tables_become_sentences(records_of: Records) -> None:
    deterministic = [replace(r, meta=replace(r.meta, deterministic=True))
                     for r in records_of(count=30)]
    html = render_html(build_report(deterministic))
    assert "No sampled requests recorded." in html and "No diverged requests recorded." in html
    assert "First divergence positions" not in html
    assert not _headings_only_tables(html)
    empty = render_html(build_report([]))
    assert "<table" not in empty
    for sentence in ("No mirrored requests recorded.", "No requests recorded.",
                     "No records: nothing to judge over time.",
                     "No latency recorded (no complete answer on either side).",
                     "No TTFT, TPOT, ITL, E2E recorded"):
        assert sentence in empty
