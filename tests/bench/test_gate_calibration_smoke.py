"""A tiny run of `bench/gate_calibration.py`: every cell prints and lands in the JSON table,
the vectorized verdicts agree with `gate.evaluate` over `GateInputs.from_records`, and no
cell beyond a limit is promoted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_prints_every_cell_and_agrees_with_the_gate(tmp_path: Path) -> None:
    table = tmp_path / "table.json"
    proc = subprocess.run([sys.executable, "bench/gate_calibration.py", "--smoke",
                           "--json", str(table)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")][2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| identical, iid sigma 0.15", "| errors +0.0300 (limit +0.01)",
        "| match gap 0.08 (limit 0.05)"]
    written = json.loads(table.read_text())
    assert [row["cell"] for row in written] == [row.split(" | ")[0][2:] for row in rows]
    for row in written:
        assert row["runs"] == 20 and row["checked"] > 0 and row["mismatches"] == 0
        if row["kind"] == "limit":
            assert row["promoted"]["k"] == 0, row
    assert "0 mismatches with gate.evaluate" in proc.stdout
