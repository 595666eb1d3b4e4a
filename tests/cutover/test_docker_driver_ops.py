"""DockerDriver against the real engine: stop with a grace period, remove, logs, image
backups, GPU checks on this GPU-less host, and an engine that cannot be reached.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.driver import DriverError, EngineUnavailable, NotFound
from proxy.cutover.shell.docker_driver import DockerDriver
from proxy.cutover.shell.gpus import HostGpu
from tests.cutover.docker_scene import DockerScene, published_url, wait_http
from tests.e2e.images import BUILT_LABEL, TAG_PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.docker]
IGNORE_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "print('ignoring SIGTERM', flush=True); time.sleep(600)")


def _run(docker_client: Any, scene: DockerScene, cleanup: list[Any], **kwargs: Any) -> str:
    container = docker_client.containers.run(scene.sim_image, detach=True,
                                             labels={"fleet": scene.tag}, **kwargs)
    cleanup.append(container)
    return str(container.id)


def test_stop_lets_a_graceful_engine_exit_then_remove_is_idempotent(
        driver: DockerDriver, scene: DockerScene, docker_client: Any,
        container_cleanup: list[Any]) -> None:
    container_id = _run(docker_client, scene, container_cleanup,
                        command=["--host", "0.0.0.0"], ports={"8000/tcp": ("127.0.0.1", None)})
    wait_http(published_url(docker_client, container_id) + "/health")
    assert "listening on" in driver.logs_tail(container_id)
    driver.stop(container_id, grace_s=30)
    stopped = driver.inspect(container_id)
    assert (stopped.state, stopped.exit_code) == ("exited", 0)  # it exited on SIGTERM itself
    driver.remove(container_id)
    driver.remove(container_id)
    assert driver.inspect(container_id).state == "missing"
    with pytest.raises(NotFound):
        driver.logs_tail(container_id)


def test_stop_kills_after_the_grace_period(
        driver: DockerDriver, scene: DockerScene, docker_client: Any,
        container_cleanup: list[Any]) -> None:
    container_id = _run(docker_client, scene, container_cleanup,
                        entrypoint=["python3", "-c", IGNORE_SIGTERM])
    deadline = time.monotonic() + 30
    while "ignoring SIGTERM" not in driver.logs_tail(container_id, lines=5):
        assert time.monotonic() < deadline, driver.logs_tail(container_id)
        time.sleep(0.2)
    started = time.monotonic()
    driver.stop(container_id, grace_s=1.5)
    assert time.monotonic() - started >= 1.5  # rounded up to whole seconds, never down
    assert driver.inspect(container_id).exit_code == 137  # SIGKILL
    assert len(driver.logs_tail(container_id, lines=1).splitlines()) == 1


@pytest.fixture(scope="module")
def small_image(docker_client: Any) -> str:
    """A one-file image (docker import of a tiny tar), quick to save."""
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        data = b"backup me\n"
        entry = tarfile.TarInfo("hello.txt")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    repository = f"{TAG_PREFIX}/tiny-import"
    docker_client.api.import_image_from_data(payload.getvalue(), repository=repository,
                                             tag="latest",
                                             changes=[f"LABEL {BUILT_LABEL}={TAG_PREFIX}"])
    return f"{repository}:latest"


def test_save_image_writes_a_loadable_tar_atomically(
        driver: DockerDriver, small_image: str, tmp_path: Path) -> None:
    target = tmp_path / "backup.tar"
    written = driver.save_image(small_image, str(target))
    assert written == target.stat().st_size > 1024
    assert not (tmp_path / "backup.tar.tmp").exists()
    with tarfile.open(target) as tar:
        names = tar.getnames()
        manifest = tar.extractfile("manifest.json")
        assert manifest is not None and small_image.encode() in manifest.read()
    assert "repositories" in names


def test_save_image_refuses_a_missing_image_and_an_unwritable_path(
        driver: DockerDriver, small_image: str, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="'vllm-cutover-test/absent:x' is not on this host"):
        driver.save_image("vllm-cutover-test/absent:x", str(tmp_path / "absent.tar"))
    assert os.listdir(tmp_path) == []
    with pytest.raises(DriverError, match="cannot write the image backup .*no-such-dir"):
        driver.save_image(small_image, str(tmp_path / "no-such-dir" / "backup.tar"))
    assert driver.image_exists(small_image)
    assert not driver.image_exists("vllm-cutover-test/absent:x")


def test_gpu_check_on_this_host(driver: DockerDriver) -> None:
    driver.check_gpus(("0", "1"))  # no GPU here and no container holds one: nothing to refuse
    listed = DockerDriver(gpu_lister=lambda: [HostGpu("0", "GPU-aaaa"), HostGpu("1", "GPU-bb")])
    try:
        listed.check_gpus(("1", "GPU-aaaa"))
        with pytest.raises(NotFound, match="GPU '3' does not exist on this host"):
            listed.check_gpus(("3",))
    finally:
        listed.close()


def test_unreachable_engine_says_what_to_fix(tmp_path: Path) -> None:
    absent = DockerDriver(base_url="unix:///nonexistent.sock")
    with pytest.raises(EngineUnavailable, match="/nonexistent.sock does not exist.*mount it"):
        absent.find("anything")
    with pytest.raises(EngineUnavailable, match="does not exist"):  # tried again, not cached
        absent.image_exists("anything")
    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listening: connections are refused
        refusing = DockerDriver(base_url=f"unix://{path}")
        with pytest.raises(EngineUnavailable, match="refuses connections: is dockerd running"):
            refusing.check_gpus(("0",))
