"""`verify --container` reads the startup log, `eval memory --container` the memory, of a
real container through the cutover's Docker driver (a container that prints vLLM's
warning line)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from proxy.cli import main
from proxy.cutover.shell.docker_driver import DockerDriver
from proxy.evaluate.containers import container_memory
from tests.e2e.images import BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE
from tests.e2e.servers import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

WARNING = ("(APIServer pid=1) WARNING 12-03 19:33:45 [interface.py:1458] "
           "Unknown vLLM environment variable detected: VLLM_NVFP4_GEMM_BACKEND")


@pytest.fixture
def warned(docker_client: Any, container_cleanup: list[Any]) -> Any:
    import os

    image = os.environ.get(BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE)
    script = f"import sys, time; print({WARNING!r}, flush=True); time.sleep(120)"
    container = docker_client.containers.run(image, ["python3", "-c", script], detach=True)
    container_cleanup.append(container)
    deadline = time.monotonic() + 30
    while b"Unknown vLLM" not in container.logs() and time.monotonic() < deadline:
        time.sleep(0.2)
    return container


def test_kernel_line_reads_the_container_log(warned: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", "--url", f"http://127.0.0.1:{free_port()}", "--container",
                 warned.id, "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1
    assert checks["kernel"]["status"] == "fail"
    assert "VLLM_NVFP4_GEMM_BACKEND" in checks["kernel"]["detail"]
    assert checks["health"]["status"] == "fail" and "cannot reach" in checks["health"]["detail"]


def test_container_memory_from_docker_stats(warned: Any) -> None:
    stats = container_memory(DockerDriver(), warned.id)
    assert stats.usage_bytes is not None and stats.limit_bytes is not None
    assert stats.usage_bytes > 0 and stats.limit_bytes >= stats.usage_bytes


def test_unknown_container_is_bad_input(docker_client: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--url", "http://127.0.0.1:9", "--container", "no-such-box"]) == 3
    assert "no-such-box" in capsys.readouterr().err
