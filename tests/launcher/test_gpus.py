"""FlashInfer / vLLM kernel facts as data (the GPUs: test_capabilities.py)."""

from __future__ import annotations

import pytest

from proxy.launcher import gpus


@pytest.mark.parametrize(
    ("vllm", "pin"),
    [
        ("0.22.0", "0.6.11.post2"),
        ("0.29.1", "0.6.18"),
        ("0.31.0", "0.7.0.post1"),
        ("0.32.0", "0.7.0.post1"),
        ("0.33.0rc1", "0.7.2.post1"),
        ("0.34.0", "0.7.3"),
        ("0.16.0rc2.dev236+g1234abc", None),
        ("0.30.0", None),
        ("not-a-version", None),
    ],
)
def test_flashinfer_pin(vllm: str, pin: str | None) -> None:
    assert gpus.flashinfer_pin(vllm) == pin


@pytest.mark.parametrize(
    ("backend", "name"),
    [
        ("flashinfer_cutlass", "cutlass"),
        ("flashinfer-cudnn", "cudnn"),
        ("FLASHINFER_TRTLLM", "trtllm"),
        ("flashinfer_cutedsl", "cute-dsl"),
        ("flashinfer_b12x", "b12x"),
        ("cutlass", None),
        ("marlin", None),
        ("emulation", None),
        (None, None),
    ],
)
def test_flashinfer_backend_name(backend: str | None, name: str | None) -> None:
    assert gpus.flashinfer_backend_name(backend) == name


@pytest.mark.parametrize(
    ("cc", "backend", "phrase"),
    [
        (None, "flashinfer_cutlass", "no CUDA device"),
        ((9, 0), "marlin", "Marlin W4A16"),
        ((9, 0), None, "Marlin W4A16"),
        ((9, 0), "emulation", "emulation"),
        ((7, 0), None, "no NVFP4 kernel for compute capability 7.0"),
        ((11, 0), "flashinfer_cutlass", "FlashInfer cutlass"),
        ((10, 0), "flashinfer_cutedsl", "FlashInfer cute-dsl"),
        ((12, 0), "auto", "automatic"),
        ((12, 0), "cutlass", "cutlass NVFP4 kernel"),
    ],
)
def test_vllm_kernel_for(cc: tuple[int, int] | None, backend: str | None, phrase: str) -> None:
    assert phrase in gpus.vllm_kernel_for(cc, backend)


def test_known_pins_name_every_pinned_release_and_nothing_else() -> None:
    named = gpus.known_pins().split(", ")
    assert named == sorted(named, key=lambda v: tuple(map(int, v.split("."))))
    assert set(named) == {f"{a}.{b}" for a, b in gpus.FLASHINFER_PINS}
    assert all(gpus.flashinfer_pin(f"{v}.0") for v in named)
