"""Self-test: the CPU reference path for real; the FlashInfer path against a fake
FlashInfer that computes exactly (or wrongly, or raises)."""

from __future__ import annotations

import types

import pytest
import torch

from proxy.launcher import nvfp4, selftest


def test_cpu_host_runs_the_torch_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU host
    result = selftest.run_self_test(compute_capability=(10, 0), linear_backend="flashinfer_cutedsl")
    assert result.ok, result.errors
    assert (result.path, result.device, result.flashinfer_backend) == (
        "torch-reference",
        "cpu",
        None,
    )
    assert result.shape_mnk == (128, 256, 512)
    assert result.vllm_kernel.startswith("none: no CUDA device")
    figures = result.figures
    assert figures["roundtrip_max_block_error"] <= selftest.MAX_BLOCK_ERROR
    assert figures["ref_cosine_vs_bf16"] > selftest.MIN_COSINE
    assert figures["ref_quantize_ms"] > 0 and figures["ref_gemm_ms"] > 0
    assert "cuda_matches_cpu" not in figures
    assert result.to_json()["figures"].keys() == figures.keys()


def test_reference_checks_flag_out_of_bound_figures() -> None:
    good = {
        "roundtrip_max_block_error": 0.17,
        "roundtrip_relative_rms": 0.09,
        "ref_cosine_vs_bf16": 0.99,
    }
    assert selftest._reference_checks(good) == []
    bad = {**good, "roundtrip_max_block_error": 0.3, "cuda_matches_cpu": 0.0}
    errors = selftest._reference_checks(bad)
    assert len(errors) == 2
    assert "0.3000" in errors[0] and "CPU" in errors[1]


def exact_flashinfer(scale_output: float = 1.0, modern: bool = True) -> types.ModuleType:
    """FlashInfer stand-in: quantizes with the reference, multiplies exactly."""
    fi = types.ModuleType("flashinfer")
    calls: list = []

    def quantize(x: torch.Tensor, gscale: torch.Tensor, *args: object, **kw: object) -> tuple:
        calls.append(("quantize", kw.get("do_shuffle")))
        q = nvfp4.quantize(x, gscale)
        return q.packed, q.block_scales if modern else q.block_scales.flatten()

    def mm_fp4(a, b_t, a_sf, b_sf_t, alpha, out_dtype, block_size=16, backend="auto"):
        calls.append(("mm_fp4", backend, tuple(b_t.shape)))
        one = torch.tensor(1.0)
        qa = nvfp4.NvFp4Quantized(a, a_sf.reshape(a.shape[0], -1), one)
        qb = nvfp4.NvFp4Quantized(b_t.T, b_sf_t.T.reshape(b_t.shape[1], -1), one)
        return (nvfp4.reference_mm(qa, qb) * alpha * scale_output).to(out_dtype)

    if modern:
        fi.nvfp4_quantize = quantize  # type: ignore[attr-defined]
        fi.SfLayout = types.SimpleNamespace(layout_128x4="128x4")  # type: ignore[attr-defined]
    else:
        fi.fp4_quantize = quantize  # type: ignore[attr-defined]
    fi.mm_fp4 = mm_fp4  # type: ignore[attr-defined]
    fi.calls = calls  # type: ignore[attr-defined]
    return fi


def operands() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    a = torch.randn((32, 128), generator=generator).to(torch.bfloat16)
    b = torch.randn((64, 128), generator=generator).to(torch.bfloat16)
    return a, b


@pytest.mark.parametrize("modern", [True, False])
def test_flashinfer_path_passes_when_the_kernel_matches(modern: bool) -> None:
    fi = exact_flashinfer(modern=modern)
    a, b = operands()
    result = selftest._flashinfer_path(fi, a, b, "cute-dsl", "cuda:0 (fake)", "FlashInfer")
    assert result.ok, result.errors
    assert result.path == "flashinfer" and result.flashinfer_backend == "cute-dsl"
    # bf16 output rounding only: far inside the 12%-of-max tolerance
    assert result.figures["max_abs_error_vs_ref"] < result.figures["atol"] / 10
    assert result.figures["cosine_vs_bf16"] > 0.97
    assert ("mm_fp4", "cute-dsl", (128 // 2, 64)) in fi.calls


def test_trtllm_gets_shuffled_b_scales() -> None:
    fi = exact_flashinfer()
    a, b = operands()
    selftest._flashinfer_path(fi, a, b, "trtllm", "cuda:0 (fake)", "FlashInfer")
    assert ("quantize", False) in fi.calls and ("quantize", True) in fi.calls


def test_flashinfer_path_fails_on_wrong_numbers() -> None:
    a, b = operands()
    result = selftest._flashinfer_path(
        exact_flashinfer(scale_output=1.5), a, b, "cutlass", "cuda:0 (fake)", "FlashInfer"
    )
    assert not result.ok
    assert "differs from the NVFP4 reference" in result.errors[0]


def test_flashinfer_path_reports_a_kernel_exception() -> None:
    fi = exact_flashinfer()

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("BackendSupportedError: cute-dsl not supported on 90")

    fi.mm_fp4 = broken  # type: ignore[attr-defined]
    a, b = operands()
    result = selftest._flashinfer_path(fi, a, b, "cute-dsl", "cuda:0 (fake)", "FlashInfer")
    assert not result.ok
    assert "RuntimeError: BackendSupportedError" in result.errors[0]
    assert "ref_gemm_ms" in result.figures  # the reference figures still come back


@pytest.mark.parametrize(
    ("cuda", "cc", "backend", "expected"),
    [
        (False, (10, 0), "flashinfer_cutedsl", (None, None)),
        (True, (9, 0), "flashinfer_cutedsl", (None, None)),
        (True, (10, 0), "flashinfer_cutedsl", ("cute-dsl", None)),
        (True, (12, 0), "flashinfer-cutlass", ("cutlass", None)),
        (
            True,
            (10, 0),
            None,
            ("cutlass", "auto: FlashInfer cutlass checked; vLLM's own pick may differ"),
        ),
        (
            True,
            (12, 1),
            "cutlass",
            (None, "vLLM's own cutlass kernel is not exercised; torch reference only"),
        ),
    ],
)
def test_choose_path(cuda: bool, cc: tuple[int, int], backend: str | None, expected: tuple) -> None:
    assert selftest.choose_path(cuda, cc, backend) == expected
