"""Facts about GPUs, FlashInfer and vLLM's NVFP4 kernels, as data (no I/O, no torch).

Source: VLLM_FP4_FACTS.md (GPUs and FlashInfer sections). Used by the preflight and
the self-test; cheap to import.
"""

from __future__ import annotations

import re
from typing import Literal

from packaging.version import InvalidVersion, Version

GpuFamily = Literal["sm100", "sm120", "marlin", "unsupported", "unknown", "none"]

SM100_FAMILY = frozenset({(10, 0), (10, 3), (10, 7), (11, 0)})
SM120_FAMILY = frozenset({(12, 0), (12, 1)})
MARLIN_MIN_CC = (7, 5)
# Every compute capability a CUDA GPU has reported, as nvidia-smi prints it ("10.0"); Thor
# was 10.1 before CUDA 13 named it 11.0.
KNOWN_CAPABILITIES = frozenset({
    (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0), (3, 2), (3, 5), (3, 7), (5, 0),
    (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7),
    (8, 8), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (10, 7), (11, 0), (12, 0), (12, 1),
})

FAMILY_LABEL: dict[GpuFamily, str] = {
    "sm100": "SM100-family (native NVFP4 W4A4)",
    "sm120": "SM120-family (native NVFP4 W4A4)",
    "marlin": "no native FP4 (vLLM uses Marlin W4A16 weight-only)",
    "unsupported": "no NVFP4 kernel in vLLM (Marlin needs 7.5+)",
    "unknown": "unknown to this launcher",
    "none": "no CUDA device",
}

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

# mm_fp4.is_backend_supported as FlashInfer 0.7.x answers it; used only when FlashInfer
# itself cannot be asked (not installed here, or planning for another GPU).
MM_FP4_SUPPORT_TABLE: dict[str, frozenset[int]] = {
    "cutlass": frozenset({100, 103, 107, 110, 120, 121}),
    "cudnn": frozenset({100, 103, 107, 110, 120, 121}),
    "trtllm": frozenset({100, 103, 107}),
    "cute-dsl": frozenset({100, 103, 107, 120, 121}),
    "b12x": frozenset({120, 121}),
}

# NVFP4 MoE backends that need FlashInfer, and the GPU families they run on.
FLASHINFER_MOE_FAMILIES: dict[str, frozenset[str]] = {
    "flashinfer_cutlass": frozenset({"sm100", "sm120"}),
    "flashinfer_trtllm": frozenset({"sm100"}),
    "flashinfer_cutedsl": frozenset({"sm100"}),
}

# flashinfer-python version pinned by vLLM (major, minor).
FLASHINFER_PINS: dict[tuple[int, int], str] = {
    (0, 22): "0.6.11.post2",
    (0, 29): "0.6.18",
    (0, 31): "0.7.0.post1",
    (0, 32): "0.7.0.post1",
    (0, 33): "0.7.2.post1",
}


def parse_capability(text: str) -> tuple[int, int]:
    """"10.0" -> (10, 0), as `nvidia-smi --query-gpu=compute_cap` prints it. "10" is
    refused, not read as 10.0: "12" could be 12.0 or 12.1, which are different GPUs.
    Raises ValueError quoting the text."""
    match = re.fullmatch(r"\s*([0-9]{1,2})\.([0-9])\s*", text)
    if not match:
        raise ValueError(f"--compute-capability: expected MAJOR.MINOR as nvidia-smi prints "
                         f"it, e.g. 10.0, got {text!r}")
    capability = int(match.group(1)), int(match.group(2))
    if capability not in KNOWN_CAPABILITIES:
        known = ", ".join(f"{a}.{b}" for a, b in sorted(KNOWN_CAPABILITIES) if a >= 7)
        raise ValueError(f"--compute-capability: no GPU has compute capability {text!r} "
                         f"(known from 7.0: {known})")
    return capability


def gpu_family(cc: tuple[int, int] | None) -> GpuFamily:
    """Which NVFP4 family a compute capability belongs to."""
    if cc is None:
        return "none"
    if cc in SM100_FAMILY:
        return "sm100"
    if cc in SM120_FAMILY:
        return "sm120"
    if MARLIN_MIN_CC <= cc < (10, 0):
        return "marlin"
    if cc < MARLIN_MIN_CC:
        return "unsupported"
    return "unknown"


def cc_int(cc: tuple[int, int]) -> int:
    """(10, 0) -> 100, as FlashInfer numbers capabilities."""
    return cc[0] * 10 + cc[1]


def normalize_backend(name: str | None) -> str | None:
    """vLLM's own normalisation of backend values: lower case, '-' -> '_'."""
    return None if name is None else name.strip().lower().replace("-", "_")


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


def table_supports(fi_backend: str, cc: tuple[int, int]) -> bool:
    return cc_int(cc) in MM_FP4_SUPPORT_TABLE.get(fi_backend, frozenset())


def vllm_kernel_for(cc: tuple[int, int] | None, linear_backend: str | None) -> str:
    """One phrase: what vLLM will run for NVFP4 linear layers with this GPU and backend."""
    family = gpu_family(cc)
    backend = normalize_backend(linear_backend) or "auto"
    if family == "none":
        return "none: no CUDA device, FP4 GEMM settings have no effect on this host"
    if backend == "emulation":
        return "emulation (dequantize and matmul in 16-bit; slow, for debugging)"
    if family == "unsupported" and cc is not None:
        return f"none: no NVFP4 kernel for compute capability {cc[0]}.{cc[1]}"
    if family == "marlin":
        return "Marlin W4A16 (weight-only FP4, activations stay 16-bit)"
    fi_backend = flashinfer_backend_name(backend)
    if fi_backend is not None:
        return f"FlashInfer {fi_backend} NVFP4 W4A4 GEMM ({backend})"
    if backend == "auto":
        return "vLLM's automatic NVFP4 kernel choice (logged as 'Using ... for NVFP4 GEMM')"
    return f"{backend} NVFP4 kernel"
