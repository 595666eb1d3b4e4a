"""The suite's lanes (tests/conftest.py): which lane a test runs in, and the image-build
lock that lets two lanes' processes ask for the same Docker image at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import lane
from tests.e2e.images import build_lock

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class _Item:
    """What `lane` reads of a pytest item: its markers and fixture names."""

    markers: set[str] = field(default_factory=set)
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


@pytest.mark.parametrize(("markers", "fixtures", "expected"), [
    (set(), [], "rest"),
    ({"e2e", "slow"}, [], "rest"),
    ({"docker", "e2e", "slow"}, ["docker_client", "cutover_images"], "rest"),  # the simulator
    ({"vllm"}, [], "engines"),
    ({"docker", "vllm"}, ["docker_client", "cutover_images", "vllm_room"], "engines"),
    ({"docker", "engines_lane"}, ["docker_client", "cutover_images"], "engines"),  # balance
    (set(), ["vllm_python"], "engines"),
    ({"solo", "e2e"}, [], "solo"),
    ({"solo", "vllm"}, ["vllm_python"], "solo"),
])
def test_lane_by_markers_and_fixtures(markers: set[str], fixtures: list[str],
                                      expected: str) -> None:
    assert lane(_Item(markers, fixtures)) == expected  # type: ignore[arg-type]


_HOLD = """
import sys, time
from tests.e2e.images import build_lock
with build_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_build_lock_makes_a_second_process_wait(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CUTOVER_CACHE", str(tmp_path))
    tag = "vllm-cutover-test/sim:latest"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, tag, "1.5"], cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with build_lock(tag):
            waited = time.monotonic() - started
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    assert waited > 0.8, waited  # held about 1.5 s by the other process
    started = time.monotonic()
    with build_lock("vllm-cutover-test/sidecar:latest"), build_lock(tag):  # free: no wait
        assert time.monotonic() - started < 0.5
    assert {p.name for p in (tmp_path / "locks").iterdir()} == {
        "vllm-cutover-test_sim_latest.lock", "vllm-cutover-test_sidecar_latest.lock"}
