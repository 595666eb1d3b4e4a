"""The Grafana dashboard in compose/ reads only series the proxy exports, grouped by
labels those series have; the provisioning files point at it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from proxy.metrics import BulkHistogram, ProxyMetrics

COMPOSE = Path(__file__).resolve().parents[1] / "compose"
DASHBOARD = COMPOSE / "grafana" / "dashboards" / "vllm-cutover.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
METRIC = re.compile(r"\bvllm_cutover_[a-z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR_LABELS = re.compile(r"[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)")


def _exported() -> dict[str, tuple[str, ...]]:
    """Sample name -> its labels, for every series ProxyMetrics declares."""
    metrics = ProxyMetrics(CollectorRegistry())
    labels: dict[str, tuple[str, ...]] = {}
    for value in [*vars(metrics).values(), *vars(metrics.evidence).values()]:
        if isinstance(value, MetricWrapperBase):
            labels[value._name] = tuple(value._labelnames)
        elif isinstance(value, BulkHistogram):
            labels[value.name] = value.labelnames
    names: dict[str, tuple[str, ...]] = {}
    for family in metrics.registry.collect():
        for suffix in SUFFIXES[family.type]:
            extra = ("le",) if suffix == "_bucket" else ()
            names[family.name + suffix] = (*labels.get(family.name, ()), *extra)
    return names


def _targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"]
            for target in panel.get("targets", ())]


def test_dashboard_is_valid_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "vllm-cutover" and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for shown in ("match rate", "TTFT", "ITL", "Unstreamed answers", "Shadow drops",
                  "Cutover phase", "Gate checks", "Time left", "Client 5xx", "Diverged answers"):
        assert shown in titles, titles


def test_every_expression_reads_exported_series_by_their_labels() -> None:
    exported = _exported()
    known = exported
    used: set[str] = set()
    for title, expr in _targets(json.loads(DASHBOARD.read_text())):
        names = set(METRIC.findall(expr))
        assert names, f"{title}: no vllm_cutover_* series in {expr!r}"
        assert names <= set(known), f"{title}: unknown {sorted(names - set(known))}"
        used |= names
        labels = {label for name in names for label in known[name]}
        grouped = {label.strip() for group in GROUPING.findall(expr)
                   for label in group.split(",") if label.strip()}
        selected = set(SELECTOR_LABELS.findall(expr))
        assert grouped | selected <= labels, f"{title}: {sorted((grouped | selected) - labels)}"
    assert {"vllm_cutover_cutover_phase", "vllm_cutover_gate_check",
            "vllm_cutover_cutover_deadline_timestamp_seconds"} <= used


def test_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    provisioning = COMPOSE / "grafana" / "provisioning"
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["uid"] == "prometheus"
    dashboard = json.loads(DASHBOARD.read_text())
    assert {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", ())} \
        == {"prometheus"}
    provider = yaml.safe_load((provisioning / "dashboards" / "vllm-cutover.yml").read_text())
    mounted = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((COMPOSE / "production.yml").read_text())
    assert f"./grafana/dashboards:{mounted}:ro" in compose["services"]["grafana"]["volumes"]
    prometheus = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for group in job["static_configs"]
               for t in group["targets"]}
    assert targets == {"sidecar:8001", "old-vllm:8000", "new-vllm:8000"}
