from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from proxy.compare.types import ExchangeRecord
from proxy.report.html import render_html
from proxy.report.model import build_report


def test_html_is_self_contained_with_plots_and_verdict(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    html = render_html(build_report(records_of(count=600, diverge_every=4, new_slowdown=1.3)))
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html and not re.search(r"(src|href)=\"https?:", html)
    assert html.count("<svg") == 3  # TTFT CDF, E2E CDF, divergence histogram
    assert "TTFT CDF" in html and "E2E latency CDF" in html and "First divergence positions" in html
    assert "FAIL" in html and "baseline vs old (noise)" in html


def test_unstreamed_only_traffic_charts_its_own_e2e_and_rows(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    records = [replace(r, meta=replace(r.meta, stream=False)) for r in records_of(count=60)]
    html = render_html(build_report(records))
    assert html.count("<svg") == 3
    assert "E2E latency CDF (unstreamed answers)" in html
    assert "E2E (unstreamed)" in html and "TPOT (unstreamed)" in html
    streamed = render_html(build_report(records_of(count=60)))
    assert "unstreamed" not in streamed
