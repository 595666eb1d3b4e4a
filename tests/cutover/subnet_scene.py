"""A user network with a subnet of its own and the old sim container at a fixed IP on it,
so that a test can give another container that IP (`--ip`), as the daemon may when it
hands addresses out again (the `subnet_stack` fixture, wired in conftest.py)."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.driver import LABEL_CUTOVER, LABEL_REPLACES
from tests.e2e.images import ImageBuilder
from tests.e2e.servers import http_ok

MODEL = "tiny-sim"
SIM_ARGS = ["--host", "0.0.0.0", "--port", "8000", "--model-name", MODEL,
            "--ttft-ms", "20", "--itl-ms", "10"]
FAST = ["--min-samples", "20", "--analysis-timeout", "120", "--scale-down-delay", "1",
        "--analysis-delay", "1", "--shutdown-grace", "5"]


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not http_ok(url):
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.3)


def prompt_tokens(url: str) -> float:
    """The prompt tokens a sim engine has been sent (its vLLM-style /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(r"^vllm:prompt_tokens_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    assert found, text[:500]
    return float(found.group(1))


def _own_subnet(docker_client: Any, name: str, seed: int) -> Any:
    """A network on a /24 of its own (so others may take `--ip` on it): the first of a
    few candidates that no other network on this daemon overlaps (the daemon's own
    networks, or another test's, may hold any one of them)."""
    import docker

    for attempt in range(16):
        subnet = f"10.{200 + (seed + attempt) % 50}.{(seed * 7 + attempt) % 250}.0/24"
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            return docker_client.networks.create(name, ipam=ipam)
        except docker.errors.APIError as exc:
            if "overlap" not in str(exc).lower():
                raise
    raise AssertionError(f"no free /24 for {name} after 16 tries")


@pytest.fixture
def subnet_stack(docker_client: Any, cutover_images: ImageBuilder,
                 tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A network with a subnet of its own, old on it at a fixed IP, the new image's tag."""
    import docker

    sim = cutover_images.sim()
    docker_client.images.get(sim).tag("vllm-cutover-test/sim", "new")
    tag = uuid.uuid4().hex[:8]
    network = _own_subnet(docker_client, f"cutover-id-{tag}", int(tag[:4], 16))
    # old gets its address from the daemon (a static one would be insisted on at restart)
    old = docker_client.containers.create(
        sim, SIM_ARGS, name=f"vllm-old-{tag}", labels={"fleet": tag}, shm_size="256m")
    network.connect(old)
    old.start()
    old.reload()
    old_ip = old.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
    old_url = f"http://{old_ip}:8000"
    wait_http(old_url + "/health")
    others: list[Any] = []
    try:
        yield {"old": old, "old_url": old_url, "old_ip": old_ip, "network": network,
               "sim": sim, "tag": tag, "work": tmp_path, "others": others}
    finally:
        for container in docker_client.containers.list(all=True,
                                                       filters={"label": LABEL_CUTOVER}):
            if container.labels.get(LABEL_REPLACES) == old.name:
                container.remove(force=True)
        for container in [old, *others]:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
        network.remove()


