"""`--self-test`: run an NVFP4 GEMM here and compare it with the torch reference.

Where the GPU has native FP4 and FlashInfer is importable, random matrices go through
`flashinfer.fp4_quantize` + `flashinfer.mm_fp4` with the chosen backend, and the result
is compared with the reference (dequantize both operands, fp32 matmul: atol
0.12 * max|ref|, rtol 0.1) and with a bf16 `torch.mm` (cosine > 0.97), as FlashInfer's
own tests do. Elsewhere the torch reference runs alone (on CUDA when present, else the
CPU), its round-trip error is checked against the format's bounds, and the result says
which kernel vLLM will use instead. Figures (timings, errors) come back as data. Imports torch: import this module lazily.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from proxy.launcher import capabilities, nvfp4
from proxy.launcher.gpus import flashinfer_backend_name, normalize_backend, vllm_kernel_for

logger = logging.getLogger(__name__)

ATOL_FRACTION = 0.12
RTOL = 0.1
MIN_COSINE = 0.97
# Bounds of the format itself: half an e2m1 step at the top of the grid (1/6 of the
# block's amax) widened by FP8-E4M3 scale rounding (1/16), and a loose RMS bound that
# Gaussian data meets with margin (measured ~0.095).
MAX_BLOCK_ERROR = 0.1875
MAX_RELATIVE_RMS = 0.12

SelfTestPath = Literal["flashinfer", "torch-reference"]


@dataclass(frozen=True)
class SelfTestResult:
    """Outcome of one self-test: which path ran, where, and its figures."""

    path: SelfTestPath
    device: str  # "cuda:0 (NVIDIA H200)" or "cpu"
    ok: bool
    flashinfer_backend: str | None  # mm_fp4 backend on the FlashInfer path
    vllm_kernel: str  # what vLLM will run for NVFP4 GEMMs on this host
    shape_mnk: tuple[int, int, int]
    figures: dict[str, float] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    note: str | None = None  # what the self-test did not exercise, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "device": self.device,
            "ok": self.ok,
            "flashinfer_backend": self.flashinfer_backend,
            "vllm_kernel": self.vllm_kernel,
            "shape_mnk": list(self.shape_mnk),
            "figures": {k: round(v, 6) for k, v in self.figures.items()},
            "errors": list(self.errors),
            "note": self.note,
        }


def run_self_test(
    *,
    compute_capability: tuple[int, int] | None,
    linear_backend: str | None,
    m: int = 128,
    n: int = 256,
    k: int = 512,
    seed: int = 0,
) -> SelfTestResult:
    """Run the self-test for the chosen vLLM linear backend on this host."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    label = f"cuda:0 ({torch.cuda.get_device_name(0)})" if cuda else "cpu"
    kernel = vllm_kernel_for(compute_capability if cuda else None, linear_backend)
    generator = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), generator=generator, device=device).to(torch.bfloat16)
    b = torch.randn((n, k), generator=generator, device=device).to(torch.bfloat16)

    backend, note = choose_path(cuda, compute_capability, linear_backend)
    if backend is not None:
        flashinfer = _import_flashinfer()
        if flashinfer is not None:
            return replace(_flashinfer_path(flashinfer, a, b, backend, label, kernel), note=note)
        note = "FlashInfer not importable here; torch reference only"
    return replace(_reference_path(a, b, label, kernel), note=note)


def choose_path(
    cuda: bool, compute_capability: tuple[int, int] | None, linear_backend: str | None
) -> tuple[str | None, str | None]:
    """(mm_fp4 backend to run, None for the torch reference alone; a note on what is
    not exercised). FlashInfer runs only on a native-FP4 GPU and when vLLM would use it."""
    cc = compute_capability
    if not cuda or cc is None or capabilities.family_of(cc) not in capabilities.NATIVE_FP4:
        return None, None
    fi_backend = flashinfer_backend_name(linear_backend)
    if fi_backend is not None:
        return fi_backend, None
    chosen = normalize_backend(linear_backend) or "auto"
    if chosen == "auto" and capabilities.mm_fp4_supports("cutlass", cc):
        return "cutlass", "auto: FlashInfer cutlass checked; vLLM's own pick may differ"
    if chosen == "auto":
        return None, f"FlashInfer lists no FP4 GEMM for {capabilities.text(cc)}; torch reference only"
    return None, f"vLLM's own {chosen} kernel is not exercised; torch reference only"


def _import_flashinfer() -> Any | None:
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        logger.info("flashinfer not importable for the self-test: %s", exc)
        return None
    return flashinfer


def _timed_ms(fn: Callable[[], Any], device: torch.device, repeats: int = 3) -> tuple[Any, float]:
    """Result of `fn` and its median wall time in ms after one warm-up call."""
    result = fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return result, sorted(samples)[len(samples) // 2]


def _cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(
        x.float().reshape(-1), y.float().reshape(-1), dim=0
    ).item()


def _reference(a: torch.Tensor, b: torch.Tensor) -> tuple[dict[str, float], torch.Tensor]:
    """Figures of the torch reference and its fp32 GEMM output."""
    device = a.device
    (qa, qb), quantize_ms = _timed_ms(lambda: (nvfp4.quantize(a), nvfp4.quantize(b)), device)
    ref, gemm_ms = _timed_ms(lambda: nvfp4.reference_mm(qa, qb), device)
    bf16, bf16_ms = _timed_ms(lambda: a @ b.T, device)
    block_a, rms_a = nvfp4.roundtrip_error(a, qa)
    block_b, rms_b = nvfp4.roundtrip_error(b, qb)
    figures = {
        "ref_quantize_ms": quantize_ms,
        "ref_gemm_ms": gemm_ms,
        "bf16_mm_ms": bf16_ms,
        "roundtrip_max_block_error": max(block_a, block_b),
        "roundtrip_relative_rms": max(rms_a, rms_b),
        "ref_cosine_vs_bf16": _cosine(ref, bf16),
    }
    if device.type == "cuda":
        # Same bits on the CPU: the reference does not depend on the device.
        cpu = nvfp4.quantize(a.cpu())
        same = bool(cpu.packed.equal(qa.packed.cpu())) and bool(
            cpu.block_scales.view(torch.uint8).equal(qa.block_scales.view(torch.uint8).cpu())
        )
        figures["cuda_matches_cpu"] = 1.0 if same else 0.0
    return figures, ref


def _reference_checks(figures: dict[str, float]) -> list[str]:
    errors = []
    if figures["roundtrip_max_block_error"] > MAX_BLOCK_ERROR:
        errors.append(
            f"round-trip error {figures['roundtrip_max_block_error']:.4f} of a block's amax "
            f"exceeds {MAX_BLOCK_ERROR}"
        )
    if figures["roundtrip_relative_rms"] > MAX_RELATIVE_RMS:
        errors.append(
            f"round-trip relative RMS error {figures['roundtrip_relative_rms']:.4f} "
            f"exceeds {MAX_RELATIVE_RMS}"
        )
    if figures["ref_cosine_vs_bf16"] <= MIN_COSINE:
        errors.append(
            f"reference GEMM cosine vs bf16 {figures['ref_cosine_vs_bf16']:.4f} <= {MIN_COSINE}"
        )
    if figures.get("cuda_matches_cpu") == 0.0:
        errors.append("NVFP4 reference on CUDA differs from the CPU bits")
    return errors


def _reference_path(a: torch.Tensor, b: torch.Tensor, label: str, kernel: str) -> SelfTestResult:
    figures, _ = _reference(a, b)
    errors = _reference_checks(figures)
    return SelfTestResult(
        path="torch-reference",
        device=label,
        ok=not errors,
        flashinfer_backend=None,
        vllm_kernel=kernel,
        shape_mnk=(a.shape[0], b.shape[0], a.shape[1]),
        figures=figures,
        errors=tuple(errors),
    )


def _flashinfer_path(
    flashinfer: Any, a: torch.Tensor, b: torch.Tensor, backend: str, label: str, kernel: str
) -> SelfTestResult:
    """FlashInfer quantize + mm_fp4 against the reference, as FlashInfer's tests call it."""
    figures, ref = _reference(a, b)
    errors = _reference_checks(figures)
    shape = (a.shape[0], b.shape[0], a.shape[1])
    try:
        out, figures["flashinfer_quantize_ms"], figures["flashinfer_gemm_ms"] = _flashinfer_mm(
            flashinfer, a, b, backend
        )
    except Exception as exc:  # noqa: BLE001 - any kernel failure is the finding
        errors.append(f"flashinfer mm_fp4 backend {backend!r} failed: {type(exc).__name__}: {exc}")
        return SelfTestResult(
            "flashinfer", label, False, backend, kernel, shape, figures, tuple(errors)
        )
    outf = out.float()
    atol = ATOL_FRACTION * ref.abs().max().item()
    figures["max_abs_error_vs_ref"] = (outf - ref).abs().max().item()
    figures["atol"] = atol
    figures["cosine_vs_bf16"] = _cosine(outf, a @ b.T)
    if not torch.allclose(outf, ref, atol=atol, rtol=RTOL):
        errors.append(
            f"mm_fp4 ({backend}) differs from the NVFP4 reference: max |diff| "
            f"{figures['max_abs_error_vs_ref']:.4g} > atol {atol:.4g} (rtol {RTOL})"
        )
    if figures["cosine_vs_bf16"] <= MIN_COSINE:
        errors.append(
            f"mm_fp4 ({backend}) cosine vs bf16 {figures['cosine_vs_bf16']:.4f} <= {MIN_COSINE}"
        )
    return SelfTestResult(
        "flashinfer", label, not errors, backend, kernel, shape, figures, tuple(errors)
    )


def _flashinfer_mm(
    flashinfer: Any, a: torch.Tensor, b: torch.Tensor, backend: str
) -> tuple[torch.Tensor, float, float]:
    """mm_fp4 output, quantize ms, GEMM ms. trtllm wants B's scales shuffled."""
    ga, gb = nvfp4.global_scale_for(a), nvfp4.global_scale_for(b)
    shuffle_b = backend == "trtllm"

    def quantize() -> tuple[Any, Any, Any, Any]:
        a_fp4, a_sf = _fi_quantize(flashinfer, a, ga, False)
        b_fp4, b_sf = _fi_quantize(flashinfer, b, gb, shuffle_b)
        return a_fp4, a_sf, b_fp4, b_sf

    (a_fp4, a_sf, b_fp4, b_sf), quantize_ms = _timed_ms(quantize, a.device)
    alpha = (1.0 / (ga * gb)).to(torch.float32)
    out, gemm_ms = _timed_ms(
        lambda: flashinfer.mm_fp4(
            a_fp4, b_fp4.T, a_sf, b_sf.T, alpha, a.dtype, block_size=16, backend=backend
        ),
        a.device,
    )
    return out, quantize_ms, gemm_ms


def _fi_quantize(flashinfer: Any, x: torch.Tensor, gscale: torch.Tensor, shuffle: bool) -> Any:
    if hasattr(flashinfer, "nvfp4_quantize") and hasattr(flashinfer, "SfLayout"):
        return flashinfer.nvfp4_quantize(
            x, gscale, sfLayout=flashinfer.SfLayout.layout_128x4, do_shuffle=shuffle
        )
    x_fp4, sf = flashinfer.fp4_quantize(x, gscale, 16, False, True)
    if sf.dim() == 1:  # older releases return the swizzled scales flat
        sf = sf.reshape(-1, ((x.shape[-1] // 16 + 3) // 4) * 4)
    return x_fp4, sf
