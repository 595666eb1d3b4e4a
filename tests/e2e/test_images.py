"""Our images: the sidecar answers `--help`, the sim serves completions, and the vLLM
image runs a user's old bare-argument container command through the launcher to a
completion (all built offline, from host-made wheels); and the plain `docker build` of
each small image from a fresh clone, pip reaching the package index inside the build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.images import BUILT_LABEL, STAGE_LABEL, ImageBuilder, build_text
from tests.e2e.resources import skip_or_fail
from tests.e2e.servers import HOST, complete, http_ok

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINER_READY_TIMEOUT_S = 420.0
ADMIN_TOKEN = "image-test-admin-token"


COMPOSE_ENV = {"DOCKER_GID": "105", "VLLM_CUTOVER_ADMIN_TOKEN": "compose-test-token"}


def _compose_config(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        skip_or_fail("docker-compose is not installed")
    return subprocess.run(
        ["docker-compose", "-f", str(REPO_ROOT / "compose" / name), "config"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": os.environ["PATH"], **env},
    )


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.parametrize(("name", "services"), [
    ("docker-compose.yml", ("old-vllm", "new-vllm", "sidecar")),
    ("production.yml", ("old-vllm", "new-vllm", "sidecar", "prometheus", "grafana")),
])
def test_compose_stacks_are_valid(name: str, services: tuple[str, ...]) -> None:
    done = _compose_config(name, COMPOSE_ENV)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    assert set(config["services"]) == set(services)
    sidecar = config["services"]["sidecar"]
    assert sidecar["group_add"] == ["105"]
    mounts = [(v["source"], v["target"]) if isinstance(v, dict) else tuple(v.split(":")[:2])
              for v in sidecar["volumes"]]  # compose v2 writes dicts, 1.29 "src:dst:rw"
    assert ("/var/run/docker.sock", "/var/run/docker.sock") in mounts
    command = sidecar["command"]
    assert command[command.index("--driver") + 1] == "docker" and "--shadow" not in command
    for engine in ("old-vllm", "new-vllm"):
        service = config["services"][engine]
        assert service.get("shm_size") or service.get("ipc") == "host", service
    # Out of the box, old vs new compares two real versions, not an image with itself.
    tags = [config["services"][e]["image"].rsplit(":", 1)[1] for e in ("old-vllm", "new-vllm")]
    assert [t.lstrip("v") for t in tags] == ["0.10.2", "0.32.0"]
    pinned = _compose_config(name, {**COMPOSE_ENV, "OLD_VLLM_IMAGE": "vllm/vllm-openai:v0.11.2",
                                    "NEW_VLLM_IMAGE": "vllm/vllm-openai:v0.33.0"})
    assert [yaml.safe_load(pinned.stdout)["services"][e]["image"] for e in
            ("old-vllm", "new-vllm")] == ["vllm/vllm-openai:v0.11.2", "vllm/vllm-openai:v0.33.0"]
    if name == "production.yml":
        gpus = [config["services"][e]["deploy"]["resources"]["reservations"]["devices"][0]
                for e in ("old-vllm", "new-vllm")]
        assert [g["device_ids"] for g in gpus] == [["0"], ["1"]]  # blue-green: one GPU each
        assert config["services"]["new-vllm"]["profiles"] == ["adopt"]


@pytest.mark.e2e
@pytest.mark.docker
def test_compose_stacks_ask_for_the_socket_group() -> None:
    done = _compose_config("production.yml", {"VLLM_CUTOVER_ADMIN_TOKEN": "t"})
    assert done.returncode != 0
    assert "DOCKER_GID=$(stat -c %g /var/run/docker.sock)" in done.stderr


def _run_help(client: Any, image: str) -> str:
    output = client.containers.run(image, ["--help"], remove=True, stdout=True, stderr=True)
    return bytes(output).decode(errors="replace")


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("name", "dockerfile", "expected"), [
    ("sidecar", "Dockerfile", "--primary"),
    ("sim", "images/sim/Dockerfile", "--ttft-ms"),
])
def test_plain_build_from_a_fresh_clone(docker_client: Any, cutover_images: ImageBuilder,
                                        name: str, dockerfile: str, expected: str) -> None:
    """No wheels made beforehand: `docker build` alone (the CA file is this machine's way
    to the index; a user with a registry passes nothing)."""
    image = cutover_images.plain(name, dockerfile)
    text = _run_help(docker_client, image)
    assert expected in text, text
    # The CA file and the source stayed in the build stage.
    probe = docker_client.containers.run(
        image, ["-c", "import os; print(os.path.exists('/src'), os.path.exists('/tmp/src'))"],
        entrypoint=["python3"], remove=True)
    assert probe.decode().split() == ["False", "False"]


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
def test_sidecar_image_runs_the_proxy(docker_client: Any, cutover_images: ImageBuilder) -> None:
    text = _run_help(docker_client, cutover_images.sidecar())
    assert "--primary" in text and "--shadow" in text


DRIVER_PROBE = ("import os; from proxy.cutover.shell.docker_driver import DockerDriver; "
                "print(os.getuid(), DockerDriver().image_exists(os.environ['IMAGE']))")


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
def test_sidecar_image_needs_only_the_socket_group(
    docker_client: Any, cutover_images: ImageBuilder
) -> None:
    """Non-root: the Docker socket answers with its group added, and without it the
    driver says what to add."""
    image = cutover_images.sidecar()
    config = docker_client.images.get(image).attrs["Config"]
    assert config["User"] == "cutover" and "python3" in config["Healthcheck"]["Test"]
    socket_gid = os.stat("/var/run/docker.sock").st_gid
    run = {"entrypoint": ["python3", "-c", DRIVER_PROBE], "environment": {"IMAGE": image},
           "volumes": {"/var/run/docker.sock": {"bind": "/var/run/docker.sock"}},
           "stdout": True, "stderr": True}
    output = docker_client.containers.run(image, remove=True, group_add=[str(socket_gid)],
                                          **run)
    assert output.decode().split() == ["10001", "True"]
    if socket_gid == 0 or os.stat("/var/run/docker.sock").st_mode & 0o006:
        return  # a socket open to everyone (or to root's group only) needs no group
    container = docker_client.containers.run(image, detach=True, **run)
    try:
        assert container.wait(timeout=60)["StatusCode"] != 0
        logs = container.logs().decode()
    finally:
        container.remove(force=True)
    assert "permission denied on the Docker socket /var/run/docker.sock" in logs, logs
    assert "--group-add $(stat -c %g /var/run/docker.sock)" in logs


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
def test_sidecar_image_mirrors_through_its_capture_worker(
    docker_client: Any, cutover_images: ImageBuilder, container_cleanup: list[Any]
) -> None:
    """The sidecar container, between two sim containers on a network: it serves the
    primary's answer, its capture worker runs inside the container, and the mirrored
    request is compared and counted."""
    sim, sidecar = cutover_images.sim(), cutover_images.sidecar()
    tag = uuid.uuid4().hex[:8]
    network = docker_client.networks.create(f"cutover-test-{tag}")
    try:
        for role in ("old", "new"):
            container_cleanup.append(docker_client.containers.run(
                sim, [], detach=True, name=f"{role}-{tag}", network=network.name))
        url = _start_published(
            docker_client, sidecar,
            ["--port", "8000", "--primary", f"http://old-{tag}:8000",
             "--shadow", f"http://new-{tag}:8000", "--admin-host", "0.0.0.0",
             "--admin-port", "8001", "--admin-token", ADMIN_TOKEN],
            container_cleanup, ready_timeout_s=60, network=network.name,
            extra_ports={"8001/tcp": (HOST, None)})
        proxy = container_cleanup[-1]
        admin = f"http://{HOST}:{proxy.ports['8001/tcp'][0]['HostPort']}"
        answer = complete(url, "sim-model", prompt="Hello world", max_tokens=4)
        assert len(answer["choices"][0]["token_ids"]) == 4
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stats.get("records", 0) < 1:
            time.sleep(0.5)
            stats = _admin_get(admin + "/admin/stats")
        assert stats["records"] >= 1, stats
        assert stats["live"]["capture_worker"]["running"], stats
        processes = " ".join(" ".join(row) for row in proxy.top()["Processes"])
        assert "proxy.mirror.worker" in processes, processes
        metrics = _admin_get(admin + "/metrics", raw=True)
        assert 'vllm_cutover_comparisons_total{against="shadow",deterministic="true",' \
               'outcome="match"} 1.0' in metrics
        _wait_healthy(proxy, timeout_s=90)  # the image's HEALTHCHECK, through its admin port
    finally:
        for container in container_cleanup:
            container.remove(force=True)
        container_cleanup.clear()
        network.remove()


def _wait_healthy(container: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        container.reload()
        health = container.attrs["State"]["Health"]
        if health["Status"] == "healthy":
            return
        assert time.monotonic() < deadline, health
        time.sleep(1.0)


def _admin_get(url: str, raw: bool = False) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        body = resp.read().decode()
    return body if raw else json.loads(body)


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
def test_sim_image_serves_completions(
    docker_client: Any, cutover_images: ImageBuilder, container_cleanup: list[Any]
) -> None:
    image = cutover_images.sim()
    # Its build stage stays tagged (the next build's cache; scripts/dev.sh prunes untagged).
    stage = docker_client.images.get(f"{cutover_images.tag_prefix}/sim-stage:build")
    assert stage.labels.get(STAGE_LABEL) == "build"
    assert docker_client.images.get(image).labels.get(BUILT_LABEL) == cutover_images.tag_prefix
    text = _run_help(docker_client, image)
    assert "--port" in text and "--ttft-ms" in text
    url = _start_published(docker_client, image, [], container_cleanup, ready_timeout_s=60)
    answer = complete(url, "sim-model", prompt="Hello world", max_tokens=4)
    assert len(answer["choices"][0]["token_ids"]) == 4


def _start_published(
    client: Any, image: str, command: list[str], cleanup: list[Any], *,
    ready_timeout_s: float, extra_ports: dict[str, Any] | None = None, **run_kwargs: Any,
) -> str:
    """Run `image` detached with its port 8000 on a random loopback port; wait for /health."""
    container = client.containers.run(
        image, command, detach=True, ports={"8000/tcp": (HOST, None), **(extra_ports or {})},
        **run_kwargs)
    cleanup.append(container)
    container.reload()
    url = f"http://{HOST}:{container.ports['8000/tcp'][0]['HostPort']}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "exited":
            logs = container.logs(tail=40).decode(errors="replace")
            raise AssertionError(f"container exited before ready:\n{logs}")
        if http_ok(url + "/health"):
            return url
        time.sleep(1.0)
    raise AssertionError(f"container not ready after {ready_timeout_s:.0f} s")


# Stands in for the public vLLM image: a Python with pip, packaging and PyYAML (vLLM's own
# dependencies), and none of ours (no aiohttp, docker, scipy...).
VLLM_STAND_IN = """FROM {sidecar}
USER root
RUN /opt/cutover/bin/pip uninstall -y -q vllm-cutover aiohttp docker rapidfuzz scipy \\
 && /opt/cutover/bin/python3 -c "import packaging, yaml"
HEALTHCHECK NONE
ENTRYPOINT []
"""
LAUNCH_DRY_RUN = ["vllm-cutover", "launch", "--dry-run", "--vllm-version", "0.12.0",
                  "--compute-capability", "10.0", "--no-validate", "--"]


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
def test_vllm_production_image_puts_the_launcher_in_the_images_python(
    docker_client: Any, cutover_images: ImageBuilder
) -> None:
    stand_in = build_text(docker_client, "vllm-cutover-test/vllm-stand-in:latest",
                          VLLM_STAND_IN.format(sidecar=cutover_images.sidecar()))
    assert docker_client.images.get(stand_in).labels.get(BUILT_LABEL) == "vllm-cutover-test"
    offline = cutover_images.vllm_production(stand_in)
    plain = cutover_images.plain("vllm-production", "images/vllm/Dockerfile.gpu",
                                 {"VLLM_IMAGE": stand_in})  # our source, built in the image
    for image in (offline, plain):
        config = docker_client.images.get(image).attrs["Config"]
        assert config["Entrypoint"] == ["vllm-cutover", "launch", "--"]
        old_command = ["--model", "/models/m", "--quantization", "nvfp4", "--fp4-gemm-backend",
                       "cutlass"]
        output = docker_client.containers.run(
            image, old_command, entrypoint=LAUNCH_DRY_RUN, remove=True, stdout=True,
            stderr=True).decode()
        assert "VLLM_NVFP4_GEMM_BACKEND=flashinfer-cutlass /opt/cutover/bin/python3 -m " \
               "vllm.entrypoints.openai.api_server --model /models/m" in output, output
        assert "--fp4-gemm-backend cutlass -> VLLM_NVFP4_GEMM_BACKEND" in output


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_image_keeps_old_bare_command_working(
    docker_client: Any,
    cutover_images: ImageBuilder,
    tiny_model: Path,
    container_cleanup: list[Any],
    vllm_room: Callable[[int], None],
) -> None:
    vllm_room(1)
    image = cutover_images.vllm(tiny_model)
    # The user's container command as it was: bare vLLM arguments, deprecated flags kept.
    old_args = ["--model", "/models/tiny", "--served-model-name", "tiny", "--port", "8000",
                "--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager",
                "--quantization", "nvfp4", "--fp4-gemm-backend", "cutlass"]
    url = _start_published(
        docker_client, image, old_args, container_cleanup,
        ready_timeout_s=CONTAINER_READY_TIMEOUT_S, shm_size="1g",
        environment={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                     "VLLM_NVFP4_GEMM_BACKEND": "cutlass"},
    )
    container = container_cleanup[-1]
    answer = complete(url, "tiny", prompt="Hello world", max_tokens=5)
    assert len(answer["choices"][0]["token_ids"]) == 5
    logs = container.logs().decode(errors="replace")
    assert "--fp4-gemm-backend" in logs and "VLLM_NVFP4_GEMM_BACKEND" in logs, logs[-3000:]
    # The launcher exec'd: PID 1 in the container is vLLM itself.
    exit_code, pid1 = container.exec_run(["cat", "/proc/1/cmdline"])
    assert exit_code == 0
    assert b"vllm.entrypoints.openai.api_server" in pid1 and b"cutover" not in pid1, pid1
