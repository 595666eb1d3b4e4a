"""A tiny run of `bench/gate_window.py`: both ways are judged by the real gate on the same
draws, and with light tails every sample promotes an identical version within 8,000
requests a side."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_small_run_prints_both_ways_and_the_buckets_promote() -> None:
    proc = subprocess.run([sys.executable, "bench/gate_window.py", "--runs", "2",
                           "--requests", "8000", "--every", "2000", "--sigma", "0.4"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ways = dict(re.findall(r"^  (window|buckets) +promoted (\d+)/2", proc.stdout, re.MULTILINE))
    assert set(ways) == {"window", "buckets"}, proc.stdout
    assert ways["buckets"] == "2", proc.stdout
