"""Facts about FlashInfer and vLLM's NVFP4 kernels, as data (no I/O, no torch).

Which GPU is which lives in `proxy.launcher.capabilities`; FlashInfer backend names
here (VLLM_FP4_FACTS.md, FlashInfer section); vLLM's FlashInfer pins with the
releases they belong to (`proxy.launcher.releases`). Used by the preflight and the
self-test; cheap to import.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from proxy.launcher import capabilities
from proxy.launcher.releases import FLASHINFER_PINS

# vLLM prints this when it falls back to Marlin (0.32 sources).
MARLIN_WARNING = (
    "Your GPU does not have native support for FP4 computation but FP4 quantization is "
    "being used. Weight-only FP4 compression will be used leveraging the Marlin kernel. "
    "This may degrade performance for compute-heavy workloads."
)

# vLLM --linear-backend value -> flashinfer.mm_fp4 backend name.
FLASHINFER_LINEAR_BACKENDS = {
    "flashinfer_cutlass": "cutlass",
    "flashinfer_cudnn": "cudnn",
    "flashinfer_trtllm": "trtllm",
    "flashinfer_cutedsl": "cute-dsl",
    "flashinfer_b12x": "b12x",
}


def normalize_backend(name: str | None) -> str | None:
    """vLLM's own normalisation of backend values: lower case, '-' -> '_'."""
    return None if name is None else name.strip().lower().replace("-", "_")


def known_pins() -> str:
    """The vLLM releases whose FlashInfer pin is known, e.g. "0.22, 0.29, 0.31, ..."."""
    return ", ".join(f"{major}.{minor}" for major, minor in sorted(FLASHINFER_PINS))


def flashinfer_backend_name(linear_backend: str | None) -> str | None:
    """mm_fp4 backend for a vLLM linear backend; None when it is not a FlashInfer one."""
    return FLASHINFER_LINEAR_BACKENDS.get(normalize_backend(linear_backend) or "")


def flashinfer_pin(vllm_version: str) -> str | None:
    """flashinfer-python version the given vLLM pins, None when unknown."""
    try:
        release = Version(vllm_version).release
    except InvalidVersion:
        return None
    padded = (*release, 0, 0)
    return FLASHINFER_PINS.get((padded[0], padded[1]))


def vllm_kernel_for(cc: tuple[int, int] | None, linear_backend: str | None) -> str:
    """One phrase: what vLLM will run for NVFP4 linear layers with this GPU and backend."""
    family = capabilities.family_of(cc)
    backend = normalize_backend(linear_backend) or "auto"
    if cc is None:
        return "none: no CUDA device, FP4 GEMM settings have no effect on this host"
    if backend == "emulation":
        return "emulation (dequantize and matmul in 16-bit; slow, for debugging)"
    if family == "unsupported":
        return f"none: no NVFP4 kernel for compute capability {capabilities.text(cc)}"
    if family == "marlin":
        return "Marlin W4A16 (weight-only FP4, activations stay 16-bit)"
    fi_backend = flashinfer_backend_name(backend)
    if fi_backend is not None:
        return f"FlashInfer {fi_backend} NVFP4 W4A4 GEMM ({backend})"
    if backend == "auto":
        return "vLLM's automatic NVFP4 kernel choice (logged as 'Using ... for NVFP4 GEMM')"
    return f"{backend} NVFP4 kernel"
