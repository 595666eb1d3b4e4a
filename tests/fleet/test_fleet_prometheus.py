"""The fleet verdict from a real Prometheus agrees with the verdict over the records.

Debian's Prometheus (session fixture, 1 s scrapes) scrapes three real proxies that mirror
to real simulated vLLMs; `read_evidence` + `fleet_verdict` must give the verdict that
the gate gives over the three proxies' records merged: on passing traffic, and on a new
version that diverges and is slower. An empty or partial scrape is never a pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main as cli_main
from proxy.evidence.store import SqliteStore
from proxy.fleet.judging import FleetEvidence, fleet_verdict, read_evidence
from proxy.fleet.prometheus import PrometheusClient
from proxy.fleet.promql import FleetQueries, parse_selector
from proxy.gate.stats import percentile
from tests.e2e.servers import free_port
from tests.fleet.fleet_scene import (
    CRITERIA,
    PACE,
    REQUESTS_PER_PROXY,
    SLOW_AND_DIVERGING,
    argo_prometheus_phases,
    fleet,
    merged_records_verdict,
    send_traffic,
    sim,
    targets,
)

pytestmark = pytest.mark.e2e
FLEET = 3 * REQUESTS_PER_PROXY


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    work = tmp_path_factory.mktemp("fleet-sims")
    with sim(work, "old", PACE) as old, sim(work, "new", PACE) as new, \
            sim(work, "base", PACE) as base, sim(work, "bad", SLOW_AND_DIVERGING) as bad:
        yield {"old": old, "new": new, "baseline": base, "bad": bad}


def _judged(prometheus_server: Any, job: str, proxies: list[Any],
            window: str | None = None, stream: bool = True) -> tuple[dict[str, Any], FleetEvidence]:
    """Point Prometheus at the fleet, wait for the settled counts, judge it."""
    prometheus_server.set_targets(job, targets(proxies))
    prometheus_server.wait_for_targets(job, len(proxies))
    send_traffic(proxies, stream=stream)
    for against in ("shadow", "baseline"):
        prometheus_server.wait_until(
            f'sum(vllm_cutover_comparisons_total{{job="{job}",against="{against}"}}) '
            f">= {FLEET}", timeout_s=30)
    client = PrometheusClient(prometheus_server.url)
    evidence = read_evidence(client, FleetQueries(parse_selector(f'{{job="{job}"}}'), window))
    return fleet_verdict(evidence, CRITERIA), evidence


def _assert_agree(fleet_result: dict[str, Any], evidence: FleetEvidence,
                  proxies: list[Any]) -> None:
    reference, inputs = merged_records_verdict(proxies)
    assert fleet_result["verdict"] == reference.verdict, (fleet_result["reasons"],
                                                          reference.reasons)
    assert evidence.inputs.new_vs_old == inputs.new_vs_old
    assert evidence.inputs.baseline_vs_old == inputs.baseline_vs_old
    assert dict(evidence.inputs.requests) == dict(inputs.requests)
    assert dict(evidence.inputs.errors) == {r: n for r, n in inputs.errors.items() if n} | \
        {r: 0 for r in evidence.inputs.errors if not inputs.errors.get(r)}
    assert evidence.inputs.admission is not None and inputs.admission is not None
    assert evidence.inputs.admission.eligible == inputs.admission.eligible
    for role in ("primary", "shadow"):
        ours, theirs = evidence.inputs.latency[role], inputs.latency[role]
        assert len(ours.ttft_s) == len(theirs.ttft_s) and len(ours.tpot_s) == len(theirs.tpot_s)
        true_p50 = percentile(theirs.ttft_s, 50)
        assert true_p50 is not None
        assert percentile(ours.ttft_s, 50) == pytest.approx(true_p50, rel=0.12)


def test_passing_fleet(prometheus_server, sims, tmp_path: Path):
    with fleet(tmp_path, sims["old"], sims["new"], sims["baseline"]) as proxies:
        result, evidence = _judged(prometheus_server, "fleet-pass", proxies)
        _assert_agree(result, evidence, proxies)
        assert result["verdict"] == "pass", result["reasons"]
        assert result["compared"] == FLEET and result["diverged"] == 0
        selector = '{job="fleet-pass"}'
        assert set(argo_prometheus_phases(prometheus_server, "fleet-pass", tmp_path).values()) \
            == {"Successful"}
        # The scene's CRITERIA as flags.
        assert cli_main(["gate", "--prometheus", prometheus_server.url, "--selector", selector,
                         "--gate-max-excess-divergence", "0.1", "--gate-max-ttft-p50-ratio", "1.3",
                         "--gate-max-tpot-p50-ratio", "1.3", "--gate-max-ttft-p99-ratio", "0",
                         "--gate-max-tpot-p99-ratio", "0", "--gate-confidence", "0.5",
                         "--gate-max-error-rate-excess", "1"]) == 0
        windowed, _ = read_and_judge(prometheus_server, selector, "10m")
        assert windowed["verdict"] == "pass", windowed["reasons"]
        # increase() extrapolates to the window's edges: an estimate (83 for 60 measured on
        # series 10 s old), the verdict the same.
        assert windowed["compared"] >= FLEET * 0.8
        # A sidecar Prometheus cannot scrape: its evidence is missing, never a pass.
        dead = f"127.0.0.1:{free_port()}"
        prometheus_server.set_targets("fleet-pass", [*targets(proxies), dead])
        prometheus_server.wait_until('count(up{job="fleet-pass"} == 0) >= 1')
        partial, _ = read_and_judge(prometheus_server, selector)
        assert partial["verdict"] == "inconclusive"
        assert any(dead in r and r.startswith("inconclusive") for r in partial["reasons"])
        prometheus_server.set_targets("fleet-pass", [])


def test_regressing_fleet(prometheus_server, sims, tmp_path: Path):
    with fleet(tmp_path, sims["old"], sims["bad"], sims["baseline"]) as proxies:
        result, evidence = _judged(prometheus_server, "fleet-bad", proxies)
        _assert_agree(result, evidence, proxies)
        assert result["verdict"] == "fail"
        fails = [r for r in result["reasons"] if r.startswith("fail")]
        assert any("match rate" in r for r in fails), result["reasons"]
        assert any("TTFT p50" in r for r in fails) and any("TPOT p50" in r for r in fails)
        assert cli_main(["gate", "--prometheus", prometheus_server.url,
                         "--selector", '{job="fleet-bad"}']) == 1
        phases = argo_prometheus_phases(prometheus_server, "fleet-bad", tmp_path)
        assert phases["match-rate"] == "Failed" and phases["ttft-p50-ratio"] == "Failed"
        assert phases["tpot-p50-ratio"] == "Failed" and phases["coverage"] == "Successful"
        prometheus_server.set_targets("fleet-bad", [])


def test_unstreamed_fleet_has_unstreamed_latency_only(prometheus_server, sims, tmp_path: Path):
    """Clients that never stream: the fleet gives the gate E2E and per-token samples of
    unstreamed answers (as many as the records, never pooled) and no streamed ones, and
    every Argo `prometheus` metric succeeds: the streamed ratios are not applicable."""
    with fleet(tmp_path, sims["old"], sims["new"], sims["baseline"]) as proxies:
        _, evidence = _judged(prometheus_server, "fleet-unstreamed", proxies, stream=False)
        _, inputs = merged_records_verdict(proxies)
        for role in ("primary", "shadow"):
            ours, theirs = evidence.inputs.latency[role], inputs.latency[role]
            assert len(theirs.e2e_unstreamed_s) == FLEET == len(ours.e2e_unstreamed_s)
            assert len(ours.tpot_unstreamed_s) == FLEET == len(theirs.tpot_unstreamed_s)
            assert ours.ttft_s == ours.tpot_s == theirs.ttft_s == theirs.e2e_s == ()
            true_p50 = percentile(theirs.tpot_unstreamed_s, 50)
            assert true_p50 is not None
            assert percentile(ours.tpot_unstreamed_s, 50) == pytest.approx(true_p50, rel=0.12)
        for proxy in proxies:  # each sidecar's own store agrees
            store = SqliteStore(str(proxy.db_path))
            try:
                latency = store.aggregates().latency
            finally:
                store.close()
            assert len(latency["shadow"].e2e_unstreamed_s) == REQUESTS_PER_PROXY
            assert latency["shadow"].ttft_s == latency["shadow"].e2e_s == ()
        phases = argo_prometheus_phases(prometheus_server, "fleet-unstreamed", tmp_path)
        assert set(phases) >= {"ttft-p50-ratio", "e2e-unstreamed-p50-ratio",
                               "tpot-unstreamed-p50-ratio"}
        assert set(phases.values()) == {"Successful"}, phases
        prometheus_server.set_targets("fleet-unstreamed", [])


def test_empty_scrape_is_inconclusive(prometheus_server):
    result, evidence = read_and_judge(prometheus_server, '{job="no-such-sidecars"}')
    assert result["verdict"] == "inconclusive" and evidence.targets_up == ()
    assert "inconclusive: no sidecar matches the selector in Prometheus" in result["reasons"]
    assert cli_main(["gate", "--prometheus", prometheus_server.url,
                     "--selector", '{job="no-such-sidecars"}']) == 2
    assert cli_main(["gate", "--prometheus", f"http://127.0.0.1:{free_port()}"]) == 4


def read_and_judge(prometheus_server: Any, selector: str,
                   window: str | None = None) -> tuple[dict[str, Any], FleetEvidence]:
    evidence = read_evidence(PrometheusClient(prometheus_server.url),
                             FleetQueries(parse_selector(selector), window))
    return fleet_verdict(evidence, CRITERIA), evidence
