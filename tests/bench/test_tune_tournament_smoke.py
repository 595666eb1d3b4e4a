"""A tiny run of `bench/tune_tournament.py`: the real race over four candidates prints its
table, and in these few runs never promotes the one beyond a limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_prints_every_candidate_and_promotes_none_beyond_a_limit() -> None:
    proc = subprocess.run([sys.executable, "bench/tune_tournament.py", "--smoke",
                           "--max-requests", "600"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split(" | ")[0].strip("| "): line for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| candidate")}
    assert set(rows) == {"fastest", "clean", "beyond", "slow", "(none)"}
    assert rows["beyond"].rstrip(" |").endswith("0.0%")
    assert rows["slow"].rstrip(" |").endswith("0.0%")
