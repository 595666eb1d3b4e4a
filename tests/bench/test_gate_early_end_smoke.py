"""A tiny run of `bench/gate_early_end.py` through the real gate and the cutover's own
early-end rule: the version at the match-rate limit ends early, a broken one is aborted by
the gate itself, an identical one is promoted and never ended early."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_one_run_a_cell_ends_only_the_undecidable_one_early() -> None:
    proc = subprocess.run([sys.executable, "bench/gate_early_end.py", "--runs", "1",
                           "--timeout", "900", "--cells", "clean,at_limit,broken"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines()
            if line.startswith("| ") and "true new version" not in line]
    by_cell = {row[0].strip("| "): row for row in rows}
    assert len(by_cell) == 3, proc.stdout
    clean = by_cell["identical to old"]
    at_limit = by_cell["diverges on 7 % vs 2 % noise (exactly at the limit)"]
    broken = by_cell["diverges on 15 % vs 2 % noise"]
    # columns: wanted, promoted, aborted (gate), ended early (would have promoted), timed out
    assert (clean[2], clean[4]) == ("1/1", "0/1 (0)")
    assert at_limit[4].startswith("1/1") and at_limit[2] == "0/1"
    assert broken[3] == "1/1" and broken[4] == "0/1 (0)"
