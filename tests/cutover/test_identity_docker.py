"""Identities, not addresses, on the real Docker engine (issue 24, items 1 and 2).

A user network with a fixed subnet lets a test give another container the old one's
former IP (`--ip`), as the daemon may when it hands out addresses again. The proxy runs
on the host with `--driver docker`, reaching containers by their IP on that network, and
clients stream through it all along. What must hold: clients and mirrored prompts only
ever reach the container the cutover knows by id, never the one that took its address.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cutover.subnet_scene import FAST, MODEL, prompt_tokens, wait_http
from tests.e2e.cutover_harness import CutoverProxy, LoadThread, cutover_cli, wait_count

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

def _impostor(docker_client: Any, stack: dict[str, Any], model: str, version: str) -> Any:
    """Another engine on the network at old's former IP."""
    container = docker_client.containers.create(
        stack["sim"], ["--host", "0.0.0.0", "--port", "8000", "--model-name", model,
                       "--version", version], labels={"fleet": stack["tag"]},
        name=f"impostor-{stack['tag']}")
    stack["others"].append(container)
    stack["network"].connect(container, ipv4_address=stack["old_ip"])
    container.start()
    return container


def test_rollback_reaches_the_real_old_container_not_its_former_address(
        docker_client: Any, subnet_stack: dict[str, Any]) -> None:
    """After `done`, old is stopped and another engine (another model, version 9.9.9) takes
    its IP; `rollback` starts old, which comes up at a new address: clients go there, none
    to the impostor."""
    stack = subnet_stack
    proxy = CutoverProxy(stack["work"], stack["old_url"])
    proxy.start()
    try:
        with LoadThread(proxy.url, MODEL, clients=8) as load:
            wait_count(load, 20, 60)
            started = cutover_cli(proxy, "start", "--old", stack["old"].name, "--new-image",
                                  "vllm-cutover-test/sim:new", "--post-promotion", "2", *FAST)
            assert started.returncode == 0, started.stderr
            proxy.wait_phase(["done"], 240)
            stack["old"].reload()
            assert stack["old"].status == "exited"
            impostor = _impostor(docker_client, stack, "other-model", "9.9.9")
            wait_http(stack["old_url"] + "/health")  # the impostor answers there now
            before = load.count
            back = cutover_cli(proxy, "rollback")
            assert back.returncode == 0, back.stderr
            ended = proxy.wait_phase(["rolled_back"], 120)
            wait_count(load, before + 50, 60)
            result = load.stop()
        stack["old"].reload()
        ip = stack["old"].attrs["NetworkSettings"]["Networks"][stack["network"].name]["IPAddress"]
        old_now = f"http://{ip}:8000"
        assert old_now != stack["old_url"]
        assert proxy.routes()["primary"] == old_now, (proxy.routes(), ended["history"])
        assert ended["old"]["url"] == old_now
        assert not result.failures, (result.summary(), result.failures[:3])
        assert prompt_tokens(stack["old_url"]) == 0  # the impostor got no client request
        impostor.reload()
        assert impostor.status == "running"
    finally:
        proxy.stop()


@pytest.mark.xfail(strict=False, reason=(
    "known defect, issue 24 open: mirroring to old stops at the reconciler's next tick (1 s), "
    "not per request; a newcomer that takes old's IP within it got 80 prompt tokens here"))
def test_no_mirrored_prompt_reaches_a_container_that_took_old_s_address(
        docker_client: Any, subnet_stack: dict[str, Any]) -> None:
    """After the promotion old is the shadow; `docker rm -f` of it and a newcomer started
    at its IP at once: the newcomer gets no mirrored prompt, clients never fail."""
    stack = subnet_stack
    proxy = CutoverProxy(stack["work"], stack["old_url"])
    proxy.start()
    try:
        with LoadThread(proxy.url, MODEL, clients=8) as load:
            wait_count(load, 20, 60)
            started = cutover_cli(proxy, "start", "--old", stack["old"].name, "--new-image",
                                  "vllm-cutover-test/sim:new", "--post-promotion", "600",
                                  *FAST, "--analysis-timeout", "300")
            assert started.returncode == 0, started.stderr
            # The anytime-valid gate wants about 1,000 answers a side before it passes.
            post = proxy.wait_phase(["post_promotion"], 360)
            assert proxy.routes()["shadow"] == stack["old_url"]
            stack["old"].remove(force=True)
            newcomer = _impostor(docker_client, stack, MODEL, "0.1.0-other")
            wait_http(stack["old_url"] + "/health")
            before = load.count
            wait_count(load, before + 100, 60)  # traffic that would have been mirrored
            result = load.stop()
        assert prompt_tokens(stack["old_url"]) == 0
        status = proxy.status()
        assert proxy.routes()["shadow"] is None, proxy.routes()
        assert "no more mirroring to" in (status.get("mirror_off") or ""), status
        assert not result.failures, (result.summary(), result.failures[:3])
        assert post["new"]["url"] == proxy.routes()["primary"]
        newcomer.reload()
        assert newcomer.status == "running"
    finally:
        proxy.stop()
