"""GPU / FlashInfer / vLLM kernel facts as data."""

from __future__ import annotations

import pytest

from proxy.launcher import gpus


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((10, 0), "sm100"),
        ((10, 3), "sm100"),
        ((10, 7), "sm100"),
        ((11, 0), "sm100"),
        ((12, 0), "sm120"),
        ((12, 1), "sm120"),
        ((9, 0), "marlin"),
        ((8, 9), "marlin"),
        ((7, 5), "marlin"),
        ((7, 0), "unsupported"),
        ((13, 0), "unknown"),
        (None, "none"),
    ],
)
def test_gpu_family(cc: tuple[int, int] | None, family: str) -> None:
    assert gpus.gpu_family(cc) == family


@pytest.mark.parametrize(
    ("vllm", "pin"),
    [
        ("0.22.0", "0.6.11.post2"),
        ("0.29.1", "0.6.18"),
        ("0.31.0", "0.7.0.post1"),
        ("0.32.0", "0.7.0.post1"),
        ("0.33.0rc1", "0.7.2.post1"),
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


def test_support_table_matches_the_facts() -> None:
    assert not any(gpus.table_supports(b, (9, 0)) for b in gpus.MM_FP4_SUPPORT_TABLE)
    assert gpus.table_supports("cute-dsl", (12, 0))
    assert not gpus.table_supports("trtllm", (12, 0))
    assert gpus.table_supports("cutlass", (11, 0))


@pytest.mark.parametrize(
    ("cc", "backend", "phrase"),
    [
        (None, "flashinfer_cutlass", "no CUDA device"),
        ((9, 0), "marlin", "Marlin W4A16"),
        ((9, 0), None, "Marlin W4A16"),
        ((9, 0), "emulation", "emulation"),
        ((7, 0), None, "no NVFP4 kernel for compute capability 7.0"),
        ((10, 0), "flashinfer_cutedsl", "FlashInfer cute-dsl"),
        ((12, 0), "auto", "automatic"),
        ((12, 0), "cutlass", "cutlass NVFP4 kernel"),
    ],
)
def test_vllm_kernel_for(cc: tuple[int, int] | None, backend: str | None, phrase: str) -> None:
    assert phrase in gpus.vllm_kernel_for(cc, backend)


@pytest.mark.parametrize(("text", "capability"), [
    ("10.0", (10, 0)), (" 12.1 ", (12, 1)), ("9.0", (9, 0)), ("7.5", (7, 5)), ("11.0", (11, 0)),
])
def test_parse_capability(text: str, capability: tuple[int, int]) -> None:
    assert gpus.parse_capability(text) == capability


@pytest.mark.parametrize(("text", "why"), [
    ("99.9", "no GPU has"), ("10.9", "no GPU has"), ("0.0", "no GPU has"),
    ("10", "expected MAJOR.MINOR"), ("10.", "expected MAJOR.MINOR"), ("sm100", "expected"),
    ("10.0.1", "expected"), ("", "expected"), ("１０.０", "expected"),
])
def test_parse_capability_refuses_what_no_gpu_reports(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as refused:
        gpus.parse_capability(text)
    assert repr(text) in str(refused.value)


def test_every_family_member_is_a_known_capability() -> None:
    assert gpus.SM100_FAMILY | gpus.SM120_FAMILY <= gpus.KNOWN_CAPABILITIES
