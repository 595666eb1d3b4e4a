"""`vllm-cutover tune` in container mode on the real Docker engine (issue 30).

The proxy runs on the host with `--driver docker` and reaches the sim containers by their
IP on a user network. Each candidate is a container made from old's configuration with
its own `--ttft-ms` (and one with `--divergence-rate 0.3`); clients stream through the
proxy all along. What must hold: the diverging one never wins, the faster clean one does,
every loser's container is gone (asked of the Docker engine by label), `--parallel 1`
runs them one after another, `tune abort` leaves no candidate container, and no client
request fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.tune.containers import LABEL_CANDIDATE, LABEL_TUNE
from tests.e2e.cutover_harness import REPO_ROOT, CutoverProxy, LoadThread, wait_count
from tests.e2e.proxy_fixtures import ADMIN_TOKEN, http_request, wait_for
from tests.e2e.servers import http_ok

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

MODEL = "tiny-sim"
OLD_ARGS = ["--host", "0.0.0.0", "--port", "8000", "--model-name", MODEL,
            "--ttft-ms", "30", "--itl-ms", "4", "--jitter", "0.1"]
# p99s and lengths not judged, so that a test-sized sample decides (as the adopt-mode e2e).
GATE_FLAGS = ("--gate-min-samples", "20", "--gate-max-ttft-p99-ratio", "0",
              "--gate-max-tpot-p99-ratio", "0", "--gate-max-tpot-unstreamed-p99-ratio", "0",
              "--gate-max-length-shift", "0", "--gate-max-error-rate-excess", "0.2")
FAST = "--ttft-ms 8 --itl-ms 2"
SLOW = "--ttft-ms 60 --itl-ms 8"
OK = "--ttft-ms 22 --itl-ms 3"  # faster than old, slower than FAST: passes, then loses
DIVERGING = "--ttft-ms 8 --itl-ms 2 --divergence-rate 0.3"
PROMOTION = ("--cutover", "min_samples=20", "--cutover", "analysis_delay_s=1",
             "--cutover", "post_promotion_s=2", "--cutover", "scale_down_delay_s=1",
             "--cutover", "warmup_timeout_s=60")


@pytest.fixture
def stack(docker_client: Any, cutover_images: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A user network, old (a sim) on it, and a proxy with --driver docker in front."""
    sim = cutover_images.sim()
    tag = uuid.uuid4().hex[:8]
    network = docker_client.networks.create(f"tune-net-{tag}")
    old = docker_client.containers.create(sim, OLD_ARGS, name=f"vllm-old-{tag}",
                                          labels={"fleet": tag})
    network.connect(old)
    old.start()
    old.reload()
    old_url = f"http://{old.attrs['NetworkSettings']['Networks'][network.name]['IPAddress']}:8000"
    wait_for(lambda: http_ok(old_url + "/health") or None, 60, "old answers")
    proxy = CutoverProxy(tmp_path, old_url, gate_args=GATE_FLAGS)
    proxy.start()
    try:
        yield {"old": old, "old_url": old_url, "proxy": proxy, "tag": tag}
    finally:
        proxy.stop()
        for container in docker_client.containers.list(
                all=True, filters={"label": f"io.vllm-cutover.replaces={old.name}"}):
            container.remove(force=True)
        old.remove(force=True)
        network.remove()


def _tune(proxy: CutoverProxy, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "VLLM_CUTOVER_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run([sys.executable, "-m", "proxy", "tune", args[0], "--proxy-admin",
                           proxy.admin_url, *args[1:]], capture_output=True, text=True,
                          timeout=120, env=env, check=False, cwd=REPO_ROOT)


def _status(proxy: CutoverProxy) -> dict[str, Any]:
    return dict(http_request("GET", proxy.admin_url + "/admin/tune").json())


def _wait_tune(proxy: CutoverProxy, phases: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = _status(proxy)
        if status["phase"] in phases:
            return status
        assert status["phase"] in ("racing", "promoting"), (status, proxy.log_tail())
        return None

    return wait_for(probe, timeout_s, f"tune phase in {phases}", every_s=0.5)


def _shown(status: dict[str, Any]) -> str:
    rows = [f"{c['name']}: {c['state']} {c['reason']}" for c in status["candidates"]]
    return "\n".join([status["reason"], *rows, *(e["event"] for e in status["history"])])


def _candidates(docker_client: Any, tune_id: str) -> list[Any]:
    return list(docker_client.containers.list(all=True,
                                              filters={"label": f"{LABEL_TUNE}={tune_id}"}))


class _Watch:
    """How many candidate containers of a tune ran at once, at most (polled)."""

    def __init__(self, docker_client: Any, tune_id: str) -> None:
        self.most, self.seen = 0, set[str]()
        self._client, self._id = docker_client, tune_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            running = self._client.containers.list(
                filters={"label": f"{LABEL_TUNE}={self._id}", "status": "running"})
            self.most = max(self.most, len(running))
            self.seen |= {c.labels[LABEL_CANDIDATE] for c in running}
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _race(docker_client: Any, proxy: CutoverProxy, start: tuple[str, ...], timeout_s: float
          ) -> tuple[dict[str, Any], Any, _Watch, str]:
    """Under steady load: `tune start` with `start`, watched until it ends; the end
    status, the load's result, the container watch and the tune's id."""
    with LoadThread(proxy.url, MODEL, clients=8) as load:
        wait_count(load, 20, 60)
        started = _tune(proxy, "start", *start)
        assert started.returncode == 0, started.stderr
        tune_id = _status(proxy)["id"]
        watch = _Watch(docker_client, tune_id)
        try:
            ended = _wait_tune(proxy, ("done", "failed", "aborted"), timeout_s)
        finally:
            watch.stop()
        result = load.stop()
    return ended, result, watch, tune_id


def test_the_fast_clean_candidate_wins_two_at_a_time_and_report_only_removes_all(
        docker_client: Any, stack: dict[str, Any]) -> None:
    proxy: CutoverProxy = stack["proxy"]
    ended, result, watch, tune_id = _race(
        docker_client, proxy,
        ("--old", stack["old"].name, "--parallel", "2", "--candidate", f"diverging={DIVERGING}",
         "--candidate", f"slow={SLOW}", "--candidate", f"fast={FAST}", "--report-only"), 150)
    states = {c["name"]: c for c in ended["candidates"]}
    assert ended["phase"] == "done" and ended["winner"] == "fast", _shown(ended)
    assert states["diverging"]["state"] in ("eliminated", "failed"), _shown(ended)
    assert states["slow"]["state"] in ("eliminated", "stopped"), _shown(ended)
    assert watch.most == 2 and watch.seen == {"slow", "diverging", "fast"}
    assert _candidates(docker_client, tune_id) == []  # report only: every one removed
    assert proxy.routes()["primary"] == stack["old_url"]  # old served throughout
    assert not result.failures, (result.summary(), result.failures[:3])


def test_parallel_one_runs_them_one_after_another_and_promotes_the_best(
        docker_client: Any, stack: dict[str, Any]) -> None:
    """fast passes first and makes way (a finalist); ok passes later, slower against old
    on the same traffic mix: fast wins, is made again, and is promoted."""
    proxy: CutoverProxy = stack["proxy"]
    ended, result, watch, tune_id = _race(
        docker_client, proxy,
        ("--old", stack["old"].name, "--parallel", "1", "--candidate", f"fast={FAST}",
         "--candidate", f"diverging={DIVERGING}", "--candidate", f"ok={OK}", *PROMOTION), 170)
    states = {c["name"]: c for c in ended["candidates"]}
    assert ended["phase"] == "done" and ended["winner"] == "fast", _shown(ended)
    assert states["diverging"]["state"] in ("eliminated", "failed"), _shown(ended)
    assert states["ok"]["state"] == "stopped", _shown(ended)  # a finalist fast beat
    assert ended["cutover"]["phase"] == "done", _shown(ended)
    assert watch.most == 1 and watch.seen == {"fast", "diverging", "ok"}
    events = [e["event"] for e in ended["history"]]
    starts = [next(i for i, e in enumerate(events) if e.startswith(f"{n}: starting"))
              for n in ("fast", "diverging", "ok")]
    assert starts == sorted(starts), events
    assert any("fast is a finalist" in e for e in events), events
    left = _candidates(docker_client, tune_id)
    assert [c.labels[LABEL_CANDIDATE] for c in left] == ["fast"]  # losers gone
    assert left[0].status == "running"
    assert proxy.routes()["primary"] == states["fast"]["url"]
    stack["old"].reload()
    assert stack["old"].status == "exited"  # stopped by the cutover, kept for rollback
    assert not result.failures, (result.summary(), result.failures[:3])


def test_abort_removes_every_candidate_container(docker_client: Any,
                                                 stack: dict[str, Any]) -> None:
    proxy: CutoverProxy = stack["proxy"]
    with LoadThread(proxy.url, MODEL, clients=4) as load:
        wait_count(load, 10, 60)
        started = _tune(proxy, "start", "--old", stack["old"].name, "--parallel", "2",
                        "--candidate", "a=--ttft-ms 20", "--candidate", "b=--ttft-ms 20",
                        "--candidate", "c=--ttft-ms 20", "--gate", "min_samples=100000")
        assert started.returncode == 0, started.stderr
        tune_id = _status(proxy)["id"]
        wait_for(lambda: len([c for c in _status(proxy)["candidates"]
                              if c["state"] == "racing"]) == 2 or None, 60, "two racing")
        aborted = _tune(proxy, "abort")
        assert aborted.returncode == 0, aborted.stderr
        assert _candidates(docker_client, tune_id) == []  # gone before abort answered
        result = load.stop()
    status = _status(proxy)
    assert status["phase"] == "aborted"
    assert {c["state"] for c in status["candidates"]} == {"stopped"}
    assert proxy.routes()["primary"] == stack["old_url"]
    assert not result.failures, (result.summary(), result.failures[:3])
