"""Tiny runs of the whole benchmark prove the harness still runs and produces every figure."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nginx_available() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        if os.environ.get("VLLM_CUTOVER_REQUIRE_E2E") == "1":
            pytest.fail("nginx is required (VLLM_CUTOVER_REQUIRE_E2E=1) but not installed")
        pytest.skip("nginx not installed")


def _bench(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "bench/proxy_bench.py", "--smoke", "--json-out", str(out), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads(out.read_text())
    assert not any(document["errors"].values()), document["errors"]
    return document, proc.stdout


def _figures(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["scenario"], f["name"]): f for f in document["figures"]}


@pytest.mark.slow
@pytest.mark.engines_lane  # two minutes, mostly waiting: the rest lane is the longer one
def test_smoke_run_measures_every_figure(tmp_path: Path, nginx_available: None) -> None:
    document, stdout = _bench(tmp_path)
    names = set(_figures(document))
    for scenario in ("latency", "throughput", "paced", "impact", "memory"):
        assert any(s == scenario for s, _ in names), f"no figure for {scenario}: {names}"
    targets = [f for f in document["figures"] if f["target"]]
    # added p50 (<= 1 ms, <= nginx-mirror), added p99 (<= nginx-mirror, <= 3 ms); bulk and
    # paced events per CPU-s (>= nginx-mirror, relay process >= nginx); slow and dead
    # shadow; memory
    assert len(targets) == 11, [f["name"] for f in targets]
    for figure in targets:
        assert isinstance(figure["value"], float) and not math.isnan(figure["value"]), figure
        assert figure["verdict"] in ("PASS", "FAIL", "noise")
    shares = document["raw"]["latency"]["mirror_shares"]
    assert shares["proxy"]["compared"][0] > 0, shares
    memory = document["raw"]["memory"]
    assert memory["hwm_mb"][0] > 10 and memory["events_per_s"][0] > 0
    assert "targets:" in stdout and "within noise" in stdout


@pytest.mark.slow
def test_nginx_mirror_path_produces_its_figures(tmp_path: Path, nginx_available: None) -> None:
    document, stdout = _bench(
        tmp_path, "--reps", "2", "--scenarios", "latency,paced,impact",
        "--paths", "proxy,nginx-mirror,nginx-mirror-headers")
    figures = _figures(document)
    for scenario, name in (("latency", "nginx-mirror added TTFT p50"),
                           ("latency", "nginx-mirror added TTFT p99"),
                           ("latency", "proxy added TTFT p50 vs nginx-mirror"),
                           ("latency", "proxy added TTFT p99 vs nginx-mirror"),
                           ("paced", "nginx-mirror events per CPU-s"),
                           ("paced", "proxy events per CPU-s vs nginx-mirror")):
        figure = figures[(scenario, name)]
        assert len(figure["rounds"]) == 2, figure  # a median over two rounds, with its spread
        assert not any(math.isnan(v) for v in figure["rounds"]), figure
    versus = figures[("paced", "proxy events per CPU-s vs nginx-mirror")]
    assert len(versus["relation_rounds"]) == 2 and versus["verdict"] in ("PASS", "FAIL", "noise")
    # nginx's CPU includes its worker, where the mirror subrequests run: > 0 per request.
    assert figures[("latency", "nginx-mirror CPU per request (16 events)")]["value"] > 0
    # nginx-mirror reads every mirror answer to its end; nginx's mirror as shipped reads
    # only the head and hangs up, so the shadow almost never sends a whole answer (a short
    # one can reach the socket before the hang-up: CI once saw 0.004 a request).
    sent = "shadow answers sent whole, per client request"
    assert 0.5 < figures[("latency", f"nginx-mirror: {sent}")]["value"] < 1.5
    assert figures[("latency", f"nginx-mirror-headers: {sent}")]["value"] < 0.1
    slow = figures[("impact", "proxy: primary TTFT p99 ratio, 10x slower shadow")]
    assert slow["reference"] == "nginx-mirror" and len(slow["reference_rounds"]) == 2
    assert "nginx-mirror" in stdout


@pytest.mark.slow
def test_smoke_run_against_the_projects_simulator(tmp_path: Path) -> None:
    document, _ = _bench(tmp_path, "--backend", "sim", "--scenarios", "latency", "--paths",
                         "direct,proxy")
    assert document["config"]["backend"] == "sim"
    shares = document["raw"]["latency"]["mirror_shares"]
    assert shares["proxy"]["compared"][0] > 0, shares
