"""A tiny run of the whole benchmark (all scenarios, all paths) proves the harness still runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nginx_available() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        if os.environ.get("VLLM_CUTOVER_REQUIRE_E2E") == "1":
            pytest.fail("nginx is required (VLLM_CUTOVER_REQUIRE_E2E=1) but not installed")
        pytest.skip("nginx not installed")


@pytest.mark.slow
def test_smoke_run_measures_every_figure(tmp_path: Path, nginx_available: None) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "bench/proxy_bench.py", "--smoke", "--json-out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads(out.read_text())
    names = {(f["scenario"], f["name"]) for f in document["figures"]}
    for scenario in ("latency", "throughput", "paced", "impact", "memory"):
        assert any(s == scenario for s, _ in names), f"no figure for {scenario}: {names}"
    targets = [f for f in document["figures"] if f["target"]]
    # added p50 (<= 1 ms, <= each nginx), added p99, bulk and paced events per CPU-s
    # (>= 40k, >= each nginx), slow and dead shadow, memory
    assert len(targets) == 13, targets
    for figure in targets:
        assert isinstance(figure["value"], float) and figure["value"] == figure["value"], figure
        assert figure["verdict"] in ("PASS", "FAIL")
    assert not any(document["errors"].values()), document["errors"]
    counters = document["raw"]["latency"]["proxy_counters"]
    assert counters.get('vllm_cutover_shadow_mirrored_total{role="shadow"}', 0) > 0, counters
    memory = document["raw"]["memory"]
    assert memory["hwm_mb"] > 10 and memory["events"] > 0
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout


@pytest.mark.slow
def test_smoke_run_against_the_projects_simulator(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "bench/proxy_bench.py", "--smoke", "--backend", "sim", "--scenarios",
         "latency", "--paths", "direct,proxy", "--json-out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["config"]["backend"] == "sim"
    assert not any(document["errors"].values()), document["errors"]
    counters = document["raw"]["latency"]["proxy_counters"]
    assert counters.get('vllm_cutover_shadow_mirrored_total{role="shadow"}', 0) > 0, counters
