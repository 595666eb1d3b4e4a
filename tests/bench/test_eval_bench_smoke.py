"""A one-round run of `bench/eval_bench.py` against the simulator produces every figure."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_produces_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    proc = subprocess.run([sys.executable, "bench/eval_bench.py", "--smoke", "--json-out",
                           str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    document = json.loads(out.read_text())
    names = [f["name"] for f in document["figures"]]
    assert names == ["eval compare requests/s", "eval compare CPU per request",
                     "eval compare requests/s per client core"]
    assert all(not math.isnan(f["value"]) and f["value"] > 0 for f in document["figures"])
    assert document["verdicts"] == ["pass"]  # the simulator answers the golden's tokens
