"""A one-round run of the cutover benchmark on the real Docker engine proves that it runs
and produces every figure, and that no client request failed while it switched."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.images import ImageBuilder

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_produces_every_figure(docker_client: Any, cutover_images: ImageBuilder,
                                         tmp_path: Path) -> None:
    out = tmp_path / "cutover.json"
    proc = subprocess.run(
        [sys.executable, "bench/cutover_bench.py", "--smoke", "--sim-image",
         cutover_images.sim(), "--json-out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads(out.read_text())
    figures = {(f["scenario"], f["name"]): f for f in document["figures"]}
    for scenario in ("promote", "blip", "rollback", "answers"):
        assert any(s == scenario for s, _ in figures), (scenario, list(figures))
    # Every figure measured; "none" (NaN) only where it is a designed value: no probe sent
    # after the decision reached old when the switch beat them all (test_cutover_figures).
    none_allowed = {("promote", "decision -> last request sent that old answered")}
    for key, figure in figures.items():
        assert key in none_allowed or not math.isnan(figure["value"]), figure
        if figure["target"]:
            assert figure["verdict"] in ("PASS", "FAIL", "noise"), figure
    # Correctness, not timing: nothing failed, and no request sent before the promotion
    # was answered by the new container.
    assert document["failures"] == {}, document["failures"]
    assert document["requests"]["steady"] > 50 and document["requests"]["probe"] > 200
    (numbers,) = [r["numbers"] for r in document["rounds"]]
    assert numbers["new_before_promote"] == 0
    assert numbers["promote_first_new_sent_ms"] >= 0
    # the clients saw each rollback: the old one answered again after each command
    for rollback in ("rollback_running", "rollback_stopped"):
        assert numbers[f"{rollback}_first_old_answer_ms"] > 0, numbers
        assert numbers[f"{rollback}_machine_ms"] >= 0, numbers
    assert "targets:" in proc.stdout and "failed or short: none" in proc.stdout
