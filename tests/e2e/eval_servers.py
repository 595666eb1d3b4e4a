"""The two extra vLLM servers the eval and verify suites add to the trio (~60 s of CI each).

- `cut_short`: the trio's weights and dtype, started *directly* (no launcher) with the
  removed `VLLM_NVFP4_GEMM_BACKEND` set and a server-wide output cap
  (`--override-generation-config '{"max_new_tokens": 6}'`): its answers are the old
  engine's first tokens, ended early, as FlashInfer's shrinking NVFP4 answers were; and
  its log carries vLLM's "Unknown vLLM environment variable" warning for `verify`.
- `fp32`: the trio's weights in float32 (the perplexity delta against bfloat16).
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.vllm_servers import VllmSpec

CUT_SHORT_TOKENS = 6
REMOVED_VAR = ("VLLM_NVFP4_GEMM_BACKEND", "cutlass")


def cut_short_spec(tiny_model: Path) -> VllmSpec:
    return VllmSpec(tiny_model, "tiny", replica=2, extra_args=(
        "--override-generation-config", f'{{"max_new_tokens": {CUT_SHORT_TOKENS}}}'),
        env=(REMOVED_VAR,))


def fp32_spec(tiny_model: Path) -> VllmSpec:
    return VllmSpec(tiny_model, "tiny", replica=3, extra_args=("--dtype", "float32"))
