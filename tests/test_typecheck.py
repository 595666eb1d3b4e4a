"""mypy over what pyproject's [tool.mypy] names (the package, scripts/ and bench/), run by
the suite so CI type-checks too: `scripts/demo_docker.py` once passed `print` where
`proxy.demo.story.watch` wants a StatusLine, and only a reader of the README found out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_mypy_scope_covers_scripts_and_bench() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"proxy", "scripts", "bench"} <= set(config["files"]), config


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    """About 50 s from a cold cache (a fresh clone), a few seconds after."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found"), done.stdout[-2000:]
