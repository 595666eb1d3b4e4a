"""Real-engine fixtures for the Docker driver's tests: an old and a new image derived from
the sim image (different env, labels, entrypoint and CMD, so "inherited from the image"
can be told from "set on the container"), a user network, and an old container with a
rich configuration, started and serving.
"""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.shell.docker_driver import DockerDriver
from tests.e2e.images import TAG_PREFIX, ImageBuilder, build_text

OLD_COMMAND = ["--host", "0.0.0.0", "--port", "8000", "--model-name", "tiny"]
NEW_VERSION = "0.33.0-sim"
NEW_IMAGE_CMD = ["--host", "0.0.0.0", "--port", "8000", "--model-name", "new-default"]


@dataclass(frozen=True)
class DockerScene:
    tag: str
    sim_image: str
    old_image: str
    new_image: str
    network: str
    second_network: str
    old_id: str
    old_name: str
    old_url: str  # through its published port
    bind_dir: Path


def derive_image(client: Any, base: str, name: str, lines: list[str]) -> str:
    """A small image FROM `base` (no context: only Dockerfile instructions)."""
    dockerfile = "\n".join([f"FROM {base}", *lines]) + "\n"
    return build_text(client, f"{TAG_PREFIX}/{name}:latest", dockerfile)


def published_url(client: Any, container_id: str, port: str = "8000/tcp") -> str:
    binding = client.api.inspect_container(container_id)["NetworkSettings"]["Ports"][port][0]
    return f"http://{binding['HostIp']}:{binding['HostPort']}"


def wait_http(url: str, timeout_s: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return bytes(resp.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def free_port() -> int:
    """A loopback port free now: the old container publishes a fixed one, as in production."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def driver() -> Iterator[DockerDriver]:
    made = DockerDriver()
    yield made
    made.close()


@pytest.fixture(scope="module")
def scene(docker_client: Any, cutover_images: ImageBuilder,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerScene]:
    sim = cutover_images.sim()
    old_image = derive_image(docker_client, sim, "sim-old", [
        "ENV IMAGE_GENERATION=old OLD_ONLY=1", "LABEL io.example.generation=old"])
    new_image = derive_image(docker_client, sim, "sim-new", [
        "ENV IMAGE_GENERATION=new", "LABEL io.example.generation=new",
        f'ENTRYPOINT ["vllm-cutover", "sim", "--version", "{NEW_VERSION}"]',
        "CMD [" + ", ".join(f'"{arg}"' for arg in NEW_IMAGE_CMD) + "]"])
    tag = uuid.uuid4().hex[:8]
    api = docker_client.api
    network, second = f"cutover-net-{tag}", f"cutover-mon-{tag}"
    for name in (network, second):
        api.create_network(name, driver="bridge")
    bind_dir = tmp_path_factory.mktemp("bind")
    (bind_dir / "weights.txt").write_text("not really weights\n")
    host_config = api.create_host_config(
        binds={str(bind_dir): {"bind": "/models", "mode": "ro"},
               f"cutover-vol-{tag}": {"bind": "/cache", "mode": "rw"}},
        shm_size="256m", ipc_mode="shareable", network_mode=network,
        ulimits=[{"Name": "nofile", "Soft": 4096, "Hard": 8192}],
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 3},
        port_bindings={8000: ("127.0.0.1", free_port())}, cap_add=["SYS_NICE"],
        security_opt=["no-new-privileges"],
        log_config={"Type": "json-file", "Config": {"max-size": "1m"}},
    )
    old_name = f"old-{tag}"
    created = api.create_container(
        old_image, OLD_COMMAND, name=old_name, host_config=host_config, ports=[8000],
        environment={"HF_HOME": "/cache", "SIM_EXTRA": "1"},
        labels={"team": "llm", "probe": tag, "fleet": tag}, stop_signal="SIGINT",
        networking_config=api.create_networking_config(
            {network: api.create_endpoint_config(aliases=["engine"])}),
    )
    old_id = created["Id"]
    try:
        api.connect_container_to_network(old_id, second)
        api.start(old_id)
        old_url = published_url(docker_client, old_id)
        wait_http(old_url + "/health")
        yield DockerScene(tag, sim, old_image, new_image, network, second, old_id,
                          old_name, old_url, bind_dir)
    finally:
        ours = api.containers(all=True, filters={"label": f"fleet={tag}"})
        for container in ours:
            api.remove_container(container["Id"], force=True)
        for name in (network, second):
            api.remove_network(name)
        api.remove_volume(f"cutover-vol-{tag}", force=True)
