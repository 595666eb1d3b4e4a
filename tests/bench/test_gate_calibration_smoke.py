"""A tiny run of `bench/gate_calibration.py`: every cell prints, the vectorized verdicts
agree with `gate.evaluate` over real GateInputs, and the new gate promotes no cell beyond
a limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_prints_every_cell_and_agrees_with_the_gate() -> None:
    proc = subprocess.run([sys.executable, "bench/gate_calibration.py", "--smoke"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| clean, sigma 0.15", "| match gap 0.08 (limit 0.05)", "| errors +0.0300 (limit +0.01)"]
    for row in rows[1:]:  # beyond a limit: the new gate promotes none of them
        new_promoted = row.split(" | ")[2]
        assert new_promoted.strip().startswith("0.0%"), row
    assert "0 mismatches with gate.evaluate" in proc.stdout
