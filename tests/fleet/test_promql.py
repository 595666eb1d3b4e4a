"""Selectors, windows and the queries built from them (no Prometheus needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.fleet.promql import SHED_REASONS, FleetQueries, parse_selector, parse_window

ROOT = Path(__file__).resolve().parents[2]


def test_selector_keeps_its_matchers():
    selector = parse_selector(' {job="vllm-cutover", namespace=~"llm|ml" ,pod!="x\\"y"} ')
    assert selector.matchers == ('job="vllm-cutover"', 'namespace=~"llm|ml"', 'pod!="x\\"y"')
    assert selector.series("up") == 'up{job="vllm-cutover",namespace=~"llm|ml",pod!="x\\"y"}'
    assert parse_selector("{}").series("up", 'a="b"') == 'up{a="b"}'


@pytest.mark.parametrize("bad", ['job="x"', '{job=x}', '{job="x" pod="y"}', "{1a=\"b\"}", ""])
def test_bad_selector_is_quoted(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        parse_selector(bad)


def test_window():
    assert parse_window(None) is None and parse_window("1h30m") == "1h30m"
    for bad in ("30", "5x", "m5", "-5m"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            parse_window(bad)


def test_counts_are_raw_without_a_window_and_increases_with_one():
    selector = parse_selector('{job="j"}')
    raw, windowed = FleetQueries(selector), FleetQueries(selector, "10m")
    assert raw.sampled() == 'sum(vllm_cutover_shadow_sampled_total{job="j"})'
    assert windowed.sampled() == 'sum(increase(vllm_cutover_shadow_sampled_total{job="j"}[10m]))'
    assert 'deterministic="true"' in raw.comparisons()
    assert raw.histogram("x_bucket") == 'sum by (role, le) (x_bucket{job="j"})'


def test_shed_reasons_are_the_ones_admission_counts():
    source = "".join(p.read_text() for p in (ROOT / "proxy" / "mirror").rglob("*.py"))
    found = set(re.findall(r'shed\([\w.]+, "(\w+)"', source))
    assert found == set(SHED_REASONS)
