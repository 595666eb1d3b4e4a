"""Every CUDA compute capability the launcher knows, its NVFP4 family, and what runs there.

The one table of GPU facts: the rule table's choices (`rules`), the planner, the preflight,
the self-test and `scan` read it; nothing else classifies a capability. Pure data, no I/O.

Sources (vLLM 0.32.0's Python sources, vLLM's CMakeLists.txt and csrc, FlashInfer 0.7.4):
- Which capabilities exist: vLLM's CMakeLists.txt `CUDA_SUPPORTED_ARCHS` (CUDA 12.8/12.9:
  7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0 10.0 10.1 10.3 12.0 12.1; CUDA 13: 7.5 ... 9.0 10.0 10.3
  11.0 12.0 12.1) and FlashInfer's `@supported_compute_capability` lists (adds 10.7).
  CUDA 13 renamed Jetson Thor's sm_101 to sm_110: 10.1 and 11.0 are the same chip.
- vLLM's own CUTLASS NVFP4 GEMM (`csrc/.../fp4/nvfp4_scaled_mm_entry.cu`,
  `cutlass_scaled_mm_supports_fp4`): 100 <= cc < 120 runs the SM100 kernel (built for
  `10.0f;11.0f`, before CUDA 13 `10.0a;10.1a;10.3a`), 120 <= cc < 130 the SM120 one.
- vLLM's NVFP4 linear kernels (`vllm/model_executor/kernels/linear/nvfp4/flashinfer.py`):
  CuTe-DSL needs `is_device_capability_family(100)` (major 10 only: not Thor's 11.0),
  FlashInfer CUTLASS `cutlass_fp4_supported() and has_device_capability(100)`, b12x
  `has_device_capability(120)`; Marlin (`utils/marlin_utils_fp4.py`) `has_device_capability(75)`.
- vLLM's NVFP4 MoE (`layers/fused_moe/experts/`): its CUTLASS MoE runs on families 100, 110
  and 120 (110 only until 0.33: `rules.CUTLASS_MOE_ON_SM110`); FlashInfer CUTLASS MoE on 9.0 and families 100 and 120 ("SM110 excluded:
  flashinfer-ai/flashinfer#3134"); TRT-LLM and CuTe-DSL MoE on family 100 only.
- FlashInfer `flashinfer/gemm/gemm_base.py` `mm_fp4` backend requirements: cudnn and
  cutlass on 100 103 107 110 120 121, trtllm 100 103 107, cute-dsl 100 103 107 120 121,
  b12x 120 121. No mm_fp4 backend lists 101 (Thor under its pre-CUDA-13 name).

So Thor (10.1 / 11.0) is its own family, `sm110`: native NVFP4 through vLLM's CUTLASS and
FlashInfer's CUTLASS/cuDNN GEMM (11.0 only), but no CuTe-DSL, TRT-LLM or FlashInfer MoE
(nor, from vLLM 0.34, vLLM's CUTLASS MoE: Marlin runs its MoE layers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Family = Literal["sm100", "sm110", "sm120", "marlin", "unsupported", "unknown"]
Capability = tuple[int, int]

NATIVE_FP4: frozenset[Family] = frozenset({"sm100", "sm110", "sm120"})


@dataclass(frozen=True)
class Gpu:
    """One compute capability: its NVFP4 family and the GPUs that report it."""

    capability: Capability
    family: Family
    examples: str


TABLE: tuple[Gpu, ...] = (
    *(Gpu(cc, "unsupported", "pre-Volta") for cc in (
        (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0), (3, 2), (3, 5), (3, 7),
        (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2))),
    Gpu((7, 0), "unsupported", "V100"),
    Gpu((7, 2), "unsupported", "Jetson Xavier"),
    Gpu((7, 5), "marlin", "T4, RTX 20xx"),
    Gpu((8, 0), "marlin", "A100, A30"),
    Gpu((8, 6), "marlin", "RTX 30xx, A10, A40"),
    Gpu((8, 7), "marlin", "Jetson Orin"),
    Gpu((8, 8), "marlin", "in CUDA 13's architecture list"),
    Gpu((8, 9), "marlin", "L4, L40S, RTX 40xx"),
    Gpu((9, 0), "marlin", "H100, H200, GH200"),
    Gpu((10, 0), "sm100", "B200, GB200"),
    Gpu((10, 1), "sm110", "Jetson Thor before CUDA 13"),
    Gpu((10, 3), "sm100", "B300, GB300"),
    Gpu((10, 7), "sm100", "in FlashInfer's SM10x lists (sm_107a)"),
    Gpu((11, 0), "sm110", "Jetson Thor (CUDA 13+)"),
    Gpu((12, 0), "sm120", "RTX 50xx, RTX PRO 6000 Blackwell"),
    Gpu((12, 1), "sm120", "GB10 (DGX Spark)"),
)
BY_CAPABILITY: dict[Capability, Gpu] = {g.capability: g for g in TABLE}
KNOWN_CAPABILITIES = frozenset(BY_CAPABILITY)

# How reasons, labels and the preflight name each family (stderr, JSON and scan alike).
FAMILY_NAME: dict[Family, str] = {
    "sm100": "SM100-family",
    "sm110": "SM110 (Jetson Thor)",
    "sm120": "SM120-family",
    "marlin": "below-SM100",
    "unsupported": "pre-Turing",
    "unknown": "unknown-GPU",
}
FAMILY_LABEL: dict[Family, str] = {
    "sm100": "SM100-family (native NVFP4 W4A4)",
    "sm110": "SM110 (Jetson Thor): native NVFP4 W4A4; no FlashInfer CuTe-DSL, TRT-LLM or "
             "MoE kernels (no CUTLASS NVFP4 MoE from vLLM 0.34)",
    "sm120": "SM120-family (native NVFP4 W4A4)",
    "marlin": "no native FP4 (vLLM uses Marlin W4A16 weight-only)",
    "unsupported": "no NVFP4 kernel in vLLM (Marlin needs 7.5+)",
    "unknown": "unknown to this launcher",
}

# FlashInfer's mm_fp4 backends and the capabilities (as FlashInfer numbers them) they list.
FLASHINFER_TABLE_VERSION = "0.7"
MM_FP4_SUPPORT: dict[str, frozenset[int]] = {
    "cutlass": frozenset({100, 103, 107, 110, 120, 121}),
    "cudnn": frozenset({100, 103, 107, 110, 120, 121}),
    "trtllm": frozenset({100, 103, 107}),
    "cute-dsl": frozenset({100, 103, 107, 120, 121}),
    "b12x": frozenset({120, 121}),
}
# vLLM's NVFP4 MoE backends that need FlashInfer, and the families vLLM runs them on.
FLASHINFER_MOE_FAMILIES: dict[str, frozenset[Family]] = {
    "flashinfer_cutlass": frozenset({"sm100", "sm120"}),
    "flashinfer_trtllm": frozenset({"sm100"}),
    "flashinfer_cutedsl": frozenset({"sm100"}),
}
# vLLM's own condition for each NVFP4 linear backend, by family (the sources above:
# CuTe-DSL and TRT-LLM are family 100 only, FlashInfer CUTLASS and vLLM's CUTLASS need
# native FP4, b12x 12.x, Marlin 7.5+); a FlashInfer one must also be listed by mm_fp4.
VLLM_LINEAR_FAMILIES: dict[str, frozenset[Family]] = {
    "flashinfer_cutedsl": frozenset({"sm100"}),
    "flashinfer_cutlass": NATIVE_FP4,
    "flashinfer_trtllm": frozenset({"sm100"}),
    "flashinfer_cudnn": NATIVE_FP4,
    "flashinfer_b12x": frozenset({"sm120"}),
    "cutlass": NATIVE_FP4,
    "marlin": frozenset({"marlin", *NATIVE_FP4}),
}


def family_of(cc: Capability | None) -> Family:
    """The NVFP4 family of a capability; "unknown" for none, or one not in the table."""
    row = BY_CAPABILITY.get(cc) if cc is not None else None
    return row.family if row else "unknown"


def cc_int(cc: Capability) -> int:
    """(10, 0) -> 100, as vLLM's `to_int()` and FlashInfer number capabilities."""
    return cc[0] * 10 + cc[1]


def mm_fp4_supports(fi_backend: str, cc: Capability) -> bool:
    """Whether FlashInfer's mm_fp4 lists this capability for the backend."""
    return cc_int(cc) in MM_FP4_SUPPORT.get(fi_backend, frozenset())


def text(cc: Capability | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def parse_capability(value: str) -> Capability:
    """The one parser of `--compute-capability` (launch and scan): "10.0" as nvidia-smi
    prints it, or a bare major "10", read as 10.0 the way a version "10" is 10.0: the .0
    part is the first GPU of each major (B200 10.0, RTX 50xx 12.0), and the capability
    taken is printed and reported, so the reading is never silent. Raises ValueError
    quoting the value, also for a capability no GPU has."""
    match = re.fullmatch(r"\s*([0-9]{1,2})(?:\.([0-9]))?\s*", value, flags=re.ASCII)
    if not match:
        raise ValueError(f"--compute-capability: expected MAJOR.MINOR as nvidia-smi prints "
                         f"it (e.g. 10.0) or MAJOR (10 = 10.0), got {value!r}")
    capability = int(match.group(1)), int(match.group(2) or 0)
    if capability not in KNOWN_CAPABILITIES:
        known = ", ".join(text(cc) for cc in sorted(KNOWN_CAPABILITIES) if cc >= (7, 0))
        raise ValueError(f"--compute-capability: no GPU has compute capability {value!r} "
                         f"(known from 7.0: {known})")
    return capability
