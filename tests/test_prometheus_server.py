"""The shared Prometheus fixture scrapes what it is pointed at, and says when a target is down."""

from __future__ import annotations

from tests.e2e.servers import free_port
from tests.prometheus_server import PrometheusServer


def test_scrapes_a_live_target_and_reports_a_dead_one(prometheus_server: PrometheusServer) -> None:
    own = prometheus_server.url.removeprefix("http://")
    dead = f"127.0.0.1:{free_port()}"
    prometheus_server.set_targets("self-check", [own, dead])
    prometheus_server.wait_for_targets("self-check", 1)
    prometheus_server.wait_until('count(up{job="self-check"}) == 2')
    rows = prometheus_server.query('up{job="self-check"}')
    assert {row["metric"]["instance"]: row["value"][1] for row in rows} == {own: "1", dead: "0"}
