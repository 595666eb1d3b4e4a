"""The Docker daemon cut at a phase of a real cutover (issue 24, item 4): a Unix-socket
forwarder stands in for the daemon (the proxy's DOCKER_HOST) and is cut and restored.
Whatever the daemon does, the cutover ends by its deadline or resumes, and what it says
at the end is what exists (containers and routes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.driver import LABEL_CUTOVER, LABEL_REPLACES
from tests.cutover.daemon_forwarder import DaemonForwarder
from tests.cutover.subnet_scene import FAST, MODEL
from tests.e2e.cutover_harness import TERMINAL, CutoverProxy, LoadThread, cutover_cli, wait_count

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]
WARMUP_S = 20


def _ours(docker_client: Any, old: Any) -> list[Any]:
    return [c for c in docker_client.containers.list(all=True, filters={"label": LABEL_CUTOVER})
            if c.labels.get(LABEL_REPLACES) == old.name]


def _proxy(stack: dict[str, Any], tmp_path: Path) -> tuple[CutoverProxy, DaemonForwarder]:
    forwarder = DaemonForwarder(tmp_path / "docker.sock")
    forwarder.restore()
    proxy = CutoverProxy(stack["work"], stack["old_url"],
                         env={"DOCKER_HOST": forwarder.docker_host})
    proxy.start()
    return proxy, forwarder


def _start(proxy: CutoverProxy, stack: dict[str, Any], *extra: str) -> None:
    started = cutover_cli(proxy, "start", "--old", stack["old"].name, "--new-image",
                          "vllm-cutover-test/sim:new", "--warmup-timeout", str(WARMUP_S),
                          *FAST, *extra)
    assert started.returncode == 0, started.stderr


def test_daemon_cut_as_the_new_container_appears(docker_client: Any,
                                                 subnet_stack: dict[str, Any],
                                                 tmp_path: Path) -> None:
    stack = subnet_stack
    proxy, forwarder = _proxy(stack, tmp_path)
    try:
        _start(proxy, stack, "--post-promotion", "2")
        deadline = time.monotonic() + 30
        while not _ours(docker_client, stack["old"]):
            assert time.monotonic() < deadline, "no new container was created"
            time.sleep(0.02)
        forwarder.cut()
        cut_at = time.monotonic()
        # The deadline holds: out of starting_new / warming by the warm-up deadline.
        left = proxy.wait_phase(["shadowing", "promoting", "post_promotion", "draining_old",
                                 "aborting", *TERMINAL], WARMUP_S + 30)
        assert time.monotonic() - cut_at < WARMUP_S + 30, left["history"]
        forwarder.restore()
        end = _wait_terminal(proxy, 180)
        _says_what_exists(docker_client, stack, proxy, end)
    finally:
        forwarder.restore()
        proxy.stop()


def test_daemon_cut_while_shadowing_resumes(docker_client: Any, subnet_stack: dict[str, Any],
                                            tmp_path: Path) -> None:
    stack = subnet_stack
    proxy, forwarder = _proxy(stack, tmp_path)
    try:
        with LoadThread(proxy.url, MODEL, clients=8) as load:
            wait_count(load, 20, 60)
            _start(proxy, stack, "--post-promotion", "2", "--manual-promote")
            proxy.wait_phase(["shadowing"], 120)
            forwarder.cut()
            time.sleep(8)
            shadowing = proxy.status()
            assert shadowing["phase"] == "shadowing", shadowing["history"]
            forwarder.restore()
            assert cutover_cli(proxy, "promote", "--force").returncode == 0
            end = _wait_terminal(proxy, 180)
            result = load.stop()
        assert end["phase"] == "done", end["history"]
        assert not result.failures, (result.summary(), result.failures[:3])
        _says_what_exists(docker_client, stack, proxy, end)
    finally:
        forwarder.restore()
        proxy.stop()


# The phases the driver acts in besides the two above, and the flags that keep each one
# long enough to be cut in (a phase whose deadline passes during the cut is left as usual).
PHASES = {
    "warming": ["--post-promotion", "2"],
    "post_promotion": ["--post-promotion", "10"],
    "draining_old": ["--post-promotion", "2", "--scale-down-delay", "10"],
}
CUT_S = 6


@pytest.mark.parametrize("phase", list(PHASES))
def test_daemon_cut_in_a_phase_resumes_and_ends_as_it_says(
        phase: str, docker_client: Any, subnet_stack: dict[str, Any],
        tmp_path: Path) -> None:
    """Cut as the phase begins, for CUT_S; restored, the cutover goes on to `done`, clients
    see no failure, and the end matches the containers (new running, old stopped) and
    the routes."""
    stack = subnet_stack
    proxy, forwarder = _proxy(stack, tmp_path)
    try:
        with LoadThread(proxy.url, MODEL, clients=8) as load:
            wait_count(load, 20, 60)
            # promoted by hand: the gate's own pace is not what is tested here
            _start(proxy, stack, *PHASES[phase], "--manual-promote")
            if phase != "warming":
                proxy.wait_phase(["shadowing"], 120)
                assert cutover_cli(proxy, "promote", "--force").returncode == 0
            cut_in = _wait_phase_closely(proxy, phase, 120)
            forwarder.cut()
            time.sleep(CUT_S)
            during = proxy.status()
            forwarder.restore()
            if phase == "warming":
                proxy.wait_phase(["shadowing"], 120)
                assert cutover_cli(proxy, "promote", "--force").returncode == 0
            end = _wait_terminal(proxy, 180)
            result = load.stop()
        assert cut_in["phase"] == phase
        assert during["phase"] not in TERMINAL, during["history"]
        assert end["phase"] == "done", end["history"]
        assert not result.failures, (result.summary(), result.failures[:3])
        _says_what_exists(docker_client, stack, proxy, end)
        stack["old"].reload()
        assert stack["old"].status != "running", end["history"][-1]  # "stopped" was true
    finally:
        forwarder.restore()
        proxy.stop()


def _wait_phase_closely(proxy: CutoverProxy, phase: str, timeout_s: float) -> dict[str, Any]:
    """The status as soon as it says `phase` (polled every 20 ms: warming is short)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = proxy.status()
        if status.get("phase") == phase:
            return status
        assert status.get("phase") not in TERMINAL and time.monotonic() < deadline, status
        time.sleep(0.02)


def _wait_terminal(proxy: CutoverProxy, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = proxy.status()
        if status["phase"] in TERMINAL and status.get("terminal"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.5)


def _says_what_exists(docker_client: Any, stack: dict[str, Any], proxy: CutoverProxy,
                      end: dict[str, Any]) -> None:
    """The end state matches the containers and routes."""
    ours = _ours(docker_client, stack["old"])
    routes = proxy.routes()
    last = end["history"][-1]["reason"]
    if end["phase"] == "done":
        (new,) = ours
        assert new.status == "running" and routes["primary"] == end["new"]["url"]
    else:
        assert routes["primary"] == stack["old_url"] and routes["shadow"] is None
        if "removed" in last:
            assert ours == [], last
        elif "kept" not in last:
            assert "no new container was created" in last and ours == [], last
