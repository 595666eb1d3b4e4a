"""The Grafana dashboard in compose/ reads only series the proxy exports, grouped by labels
those series have (or the scrape adds), one line per sidecar (`$instance`); the gate's p50
and p99 are what its latency panels show; cutover phases and route changes are annotations;
the provisioning files point at it. Against a real Prometheus every expression parses,
and a real cutover (simulated engines, a proxy process) fills every panel and annotation."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from proxy.cutover.shell.client import CutoverClient
from proxy.fleet.promql import SHED_REASONS
from proxy.gate.criteria import RATIO_LIMITS
from proxy.gate.tally import UNMIRRORABLE_REASONS
from proxy.metrics import BulkHistogram, ProxyMetrics
from tests.e2e.cutover_harness import TERMINAL, LoadThread
from tests.e2e.gate_sims import MODEL, proxy, sims
from tests.e2e.proxy_fixtures import ADMIN_TOKEN, wait_for
from tests.prometheus_server import SCRAPE_INTERVAL_S, PrometheusServer

COMPOSE = Path(__file__).resolve().parents[1] / "compose"
DASHBOARD = COMPOSE / "grafana" / "dashboards" / "vllm-cutover.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
METRIC = re.compile(r"\bvllm_cutover_[a-z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR_LABELS = re.compile(r"[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)")
SELECTOR = re.compile(r"\b(vllm_cutover_[a-z0-9_]+)(\{[^}]*\})?")
AGGREGATION = re.compile(r"\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile)"
                         r"\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(")
QUANTILE = re.compile(r"histogram_quantile\(\s*([0-9.]+)")
# Prometheus adds these to every series of a target when it scrapes it.
SCRAPE_LABELS = frozenset({"instance", "job"})
INSTANCE = 'instance=~"$instance"'


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


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"]
            for target in panel.get("targets", ())]


def _annotations(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["name"], a["expr"]) for a in dashboard["annotations"]["list"]]


def _expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """Every PromQL expression Grafana runs: the panels' and the annotations'."""
    return [*_targets(dashboard), *_annotations(dashboard)]


def _panel(dashboard: dict[str, Any], title_start: str) -> dict[str, Any]:
    found = [p for p in dashboard["panels"] if p["title"].startswith(title_start)]
    assert len(found) == 1, (title_start, [p["title"] for p in dashboard["panels"]])
    return dict(found[0])


def test_dashboard_is_valid_grafana_json() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "vllm-cutover" and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for shown in ("match rate", "TTFT", "ITL", "Unstreamed answers", "Shadow drops",
                  "Cutover phase", "Gate checks", "Time left", "Client 5xx", "Diverged answers",
                  "Coverage", "Client p99"):
        assert shown in titles, titles
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, (panel["title"], "overlaps", taken[(x, y)])
                taken[(x, y)] = panel["title"]


def test_every_expression_reads_exported_series_by_their_labels() -> None:
    exported = _exported()
    used: set[str] = set()
    for title, expr in _expressions(_dashboard()):
        names = set(METRIC.findall(expr))
        assert names, f"{title}: no vllm_cutover_* series in {expr!r}"
        assert names <= set(exported), f"{title}: unknown {sorted(names - set(exported))}"
        used |= names
        labels = {label for name in names for label in exported[name]} | SCRAPE_LABELS
        grouped = {label.strip() for group in GROUPING.findall(expr)
                   for label in group.split(",") if label.strip()}
        selected = set(SELECTOR_LABELS.findall(expr))
        assert grouped | selected <= labels, f"{title}: {sorted((grouped | selected) - labels)}"
    assert {"vllm_cutover_cutover_phase", "vllm_cutover_gate_check", "vllm_cutover_route_version",
            "vllm_cutover_cutover_deadline_timestamp_seconds"} <= used


def test_every_expression_is_per_sidecar() -> None:
    """A fleet's sidecars are told apart, never summed: each series is selected by the
    `$instance` variable and each aggregation keeps `instance`."""
    for title, expr in _expressions(_dashboard()):
        for name, selector in SELECTOR.findall(expr):
            assert INSTANCE in selector, f"{title}: {name}{selector} does not select $instance"
        for operator, grouping, labels in AGGREGATION.findall(expr):
            kept = {label.strip() for label in labels.split(",")}
            assert grouping == "by" and "instance" in kept, \
                f"{title}: {operator} {grouping} ({labels}) drops instance in {expr!r}"


def test_the_instance_variable_lists_the_sidecars() -> None:
    (variable,) = _dashboard()["templating"]["list"]
    assert variable["name"] == "instance" and variable["type"] == "query"
    assert variable["datasource"]["uid"] == "prometheus"
    assert variable["multi"] is True and variable["includeAll"] is True
    assert variable["allValue"] == ".*"  # sidecars that start later are in "All" too
    match = re.fullmatch(r"label_values\((vllm_cutover_[a-z0-9_]+), instance\)",
                         variable["query"]["query"])
    assert match is not None and variable["definition"] == variable["query"]["query"]
    # The route version is set when a sidecar starts: every sidecar has it, traffic or not.
    assert match.group(1) == "vllm_cutover_route_version"
    assert match.group(1) in _exported()


def test_latency_panels_show_the_gates_p50_and_p99() -> None:
    text = DASHBOARD.read_text()
    assert "p95" not in text and "0.95" not in text, "the gate judges p50 and p99"
    for panel in _dashboard()["panels"]:
        quantiles = {float(q) for t in panel.get("targets", ())
                     for q in QUANTILE.findall(t["expr"])}
        assert quantiles <= {0.5, 0.99}, (panel["title"], quantiles)
        if 0.99 in quantiles:
            assert "p99" in panel["title"], panel["title"]
        if 0.5 in quantiles:
            assert "p50" in panel["title"] or "median" in panel["title"], panel["title"]


def test_client_5xx_share_and_p99_head_the_dashboard() -> None:
    dashboard = _dashboard()
    first = [p for p in dashboard["panels"] if p["type"] != "row" and p["gridPos"]["y"] == 1]
    assert [p["title"] for p in first if p["title"].startswith("Client")] == \
        ["Client 5xx share (primary)", "Client p99 (primary): end-to-end / TTFT"]
    share, p99 = (_panel(dashboard, "Client 5xx share"), _panel(dashboard, "Client p99"))
    assert share["type"] == p99["type"] == "stat"
    assert share["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert 'status_class=~"5xx|none"' in share["targets"][0]["expr"]
    for target in p99["targets"]:
        assert QUANTILE.findall(target["expr"]) == ["0.99"]
    # end-to-end from the relay's own histogram: every client request, shadow or not
    assert "vllm_cutover_client_e2e_seconds_bucket" in p99["targets"][0]["expr"]
    assert 'role="primary"' in p99["targets"][1]["expr"]


def test_coverage_is_a_share_with_the_gates_shed_reasons() -> None:
    dashboard = _dashboard()
    coverage = _panel(dashboard, "Coverage")
    assert coverage["fieldConfig"]["defaults"]["unit"] == "percentunit"
    gate, compared = (t["expr"] for t in coverage["targets"])
    reasons = re.findall(r'reason=~"([^"]*)"', gate)
    assert [set(r.split("|")) for r in reasons] == [set(SHED_REASONS),
                                                   set(UNMIRRORABLE_REASONS)]
    assert "vllm_cutover_shadow_sampled_total" in gate
    assert "vllm_cutover_comparisons_total" in compared
    assert "vllm_cutover_requests_total" in compared
    assert _panel(dashboard, "Shadow drops by reason")["fieldConfig"]["defaults"]["unit"] == "reqps"


def test_annotations_mark_phase_and_route_changes() -> None:
    """One point per change: the value now against the last sample one step ($__interval,
    which Grafana makes the step) earlier, a missed scrape included. changes() over one
    step would see a single sample, and a phase's series is born at its first 1, which
    changes() does not count."""
    annotations = _dashboard()["annotations"]["list"]
    by_name = {a["name"]: a for a in annotations}
    assert set(by_name) == {"Cutover phase", "Route change (promotion, rollback)"}
    for annotation in annotations:
        assert annotation["datasource"]["uid"] == "prometheus" and annotation["enable"]
        assert "[5m] offset $__interval" in annotation["expr"]
        assert not annotation["useValueForTime"]
    assert "vllm_cutover_cutover_phase" in by_name["Cutover phase"]["expr"]
    assert "phase" in by_name["Cutover phase"]["tagKeys"].split(",")
    assert "vllm_cutover_route_version" in by_name["Route change (promotion, rollback)"]["expr"]


def test_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    provisioning = COMPOSE / "grafana" / "provisioning"
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["uid"] == "prometheus"
    dashboard = _dashboard()
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", ())}
    uids |= {a["datasource"]["uid"] for a in dashboard["annotations"]["list"]}
    uids |= {v["datasource"]["uid"] for v in dashboard["templating"]["list"]}
    assert uids == {"prometheus"}
    provider = yaml.safe_load((provisioning / "dashboards" / "vllm-cutover.yml").read_text())
    mounted = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((COMPOSE / "production.yml").read_text())
    assert f"./grafana/dashboards:{mounted}:ro" in compose["services"]["grafana"]["volumes"]
    prometheus = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for group in job["static_configs"]
               for t in group["targets"]}
    assert targets == {"sidecar:8001", "old-vllm:8000", "new-vllm:8000"}
    # $__rate_interval is four scrapes only when Grafana knows the scrape interval.
    assert source["datasources"][0]["jsonData"]["timeInterval"] == \
        prometheus["global"]["scrape_interval"]


def _as_grafana_runs_it(expr: str, instance_regex: str) -> str:
    """`expr` with the variables Grafana fills in, for the test Prometheus (1 s scrapes,
    1 s steps): $__rate_interval is then max(step + scrape, 4 scrapes)."""
    step_s = SCRAPE_INTERVAL_S
    rate_s = max(step_s + SCRAPE_INTERVAL_S, 4 * SCRAPE_INTERVAL_S)
    filled = (expr.replace("$__rate_interval", f"{rate_s}s")
              .replace("$__interval", f"{step_s}s")
              .replace("$instance", instance_regex))
    assert "$" not in filled, filled
    return filled


def _api(server: PrometheusServer, path: str, **params: Any) -> Any:
    """`data` of a Prometheus API answer; a refused query fails with Prometheus's reason."""
    url = f"{server.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            payload = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{params}: {exc.read(2000)!r}") from None
    assert payload["status"] == "success", payload
    return payload["data"]


def test_every_expression_parses_in_a_real_prometheus(prometheus_server: PrometheusServer) -> None:
    for title, expr in _expressions(_dashboard()):
        promql = _as_grafana_runs_it(expr, ".*")
        _api(prometheus_server, "/api/v1/query", query=promql)
        now_s = time.time()
        _api(prometheus_server, "/api/v1/query_range", query=promql, start=now_s - 60,
             end=now_s, step=SCRAPE_INTERVAL_S)


# Engines alike; the baseline diverges and drops connections, so the divergence and the
# backend-error panels have something to show (the gate judges new against old).
ENGINE = ("--ttft-ms", "20", "--itl-ms", "1", "--jitter", "0.2")
BASELINE = (*ENGINE, "--divergence-rate", "0.2", "--reset-rate", "0.05")
# No latency ratio judged: this test is about what the dashboard shows, not the verdict.
NO_RATIOS = tuple(arg for limit in RATIO_LIMITS for arg in (limit.flag, "0"))


def _status(client: CutoverClient, phases: tuple[str, ...]) -> dict[str, Any] | None:
    status = client.status()
    if status.get("phase") in phases:
        return status
    assert status.get("phase") not in TERMINAL, status
    return None


def _post_unreadable(url: str) -> None:
    """A body the proxy cannot read as JSON: relayed to the primary, not mirrored."""
    request = urllib.request.Request(url + "/v1/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        exc.close()


@pytest.mark.e2e
def test_a_real_cutover_fills_every_panel_and_annotation(
        prometheus_server: PrometheusServer, tmp_path: Path) -> None:
    with sims(tmp_path, {"old": ENGINE, "new": ENGINE, "baseline": BASELINE}) as up, \
            proxy(tmp_path, up["old"].url, NO_RATIOS) as px:
        assert px.admin_url is not None
        instance = px.admin_url.removeprefix("http://")
        prometheus_server.set_targets("dashboard", [instance])
        prometheus_server.wait_for_targets("dashboard", 1)
        start_s = time.time()
        client = CutoverClient(px.admin_url, ADMIN_TOKEN)
        with LoadThread(px.url, MODEL, clients=4):
            client.start({"new_url": up["new"].url, "baseline_url": up["baseline"].url,
                          "analysis_delay_s": 2.0, "analysis_timeout_s": 120.0,
                          "post_promotion_s": 2.0, "scale_down_delay_s": 0.0})
            wait_for(lambda: _status(client, ("shadowing", "promoting", "post_promotion")),
                     60, "a shadow route")
            _post_unreadable(px.url)
            wait_for(lambda: _status(client, ("done",)), 150, "the cutover done", every_s=0.5)
        prometheus_server.wait_until(
            f'vllm_cutover_cutover_phase{{instance="{instance}",phase="done"}} == 1')
        time.sleep(2 * SCRAPE_INTERVAL_S)  # the range's last step after that scrape
        end_s = time.time()
    dashboard = _dashboard()
    # What Grafana sends for this one sidecar picked: the value regex-escaped.
    picked = re.escape(instance).replace("\\", "\\\\")

    def over_the_run(expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _api(
            prometheus_server, "/api/v1/query_range", query=_as_grafana_runs_it(expr, picked),
            start=start_s, end=end_s, step=SCRAPE_INTERVAL_S)["result"]
        return result

    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            values = [v for series in over_the_run(target["expr"])
                      for _, v in series["values"] if v != "NaN"]
            assert values, f"{panel['title']} ({target['refId']}): no data in the run"
    listed = re.fullmatch(r"label_values\((\w+), instance\)",
                          dashboard["templating"]["list"][0]["query"]["query"])
    assert listed is not None
    assert instance in _api(prometheus_server, "/api/v1/label/instance/values",
                            **{"match[]": listed.group(1)})

    phase_expr, route_expr = (expr for _, expr in _annotations(dashboard))
    entered = sorted((t, series["metric"]["phase"]) for series in over_the_run(phase_expr)
                     for t, v in series["values"] if v == "1")
    at_steps = sorted((t, series["metric"]["phase"]) for series in over_the_run(
        f"max by (instance, phase) (vllm_cutover_cutover_phase{{{INSTANCE}}}) == 1")
        for t, _ in series["values"])
    # One point per phase entered, each phase once: the phases the steps saw, in order.
    assert [phase for _, phase in entered] == \
        [now for (_, before), (_, now) in pairwise([(0, ""), *at_steps]) if now != before], \
        (entered, at_steps)
    assert {"shadowing", "done"} <= {phase for _, phase in entered}, entered
    routes = [v for series in over_the_run(
        f"max by (instance) (vllm_cutover_route_version{{{INSTANCE}}})")
        for _, v in series["values"]]
    route_changes = [t for series in over_the_run(route_expr) for t, v in series["values"]
                     if v == "1"]
    # Adopting the new one as the shadow, then the promotion's swap, at least.
    assert len(route_changes) == sum(1 for a, b in pairwise(routes) if a != b) >= 2, \
        (route_changes, routes)
