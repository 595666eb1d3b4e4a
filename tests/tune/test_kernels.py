"""`--kernels auto` over GPU families x vLLM releases, against sets written out by hand.

The expected sets come from the facts (VLLM_FP4_FACTS.md and the capability notes), not
from the generator: CuTe-DSL and TRT-LLM only on SM100-family, b12x only on SM120 and only
from vLLM 0.28, FlashInfer CUTLASS / cuDNN / vLLM's CUTLASS on every native-FP4 family,
Marlin everywhere from SM75; `--linear-backend` in 0.24, `--kernel-config` from 0.30;
vLLM's CUTLASS MoE on SM110 until 0.33 only.
"""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from proxy.tune.kernels import auto_candidates

SM100, SM110, SM120, HOPPER = (10, 0), (11, 0), (12, 0), (9, 0)
V024, V030, V033, V034 = (Version(v) for v in ("0.24.0", "0.30.0", "0.33.0", "0.34.0"))
SM100_LINEAR = {"auto", "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_trtllm",
                "flashinfer_cudnn", "cutlass", "marlin"}
SM110_LINEAR = {"auto", "flashinfer_cutlass", "flashinfer_cudnn", "cutlass", "marlin"}
SM120_OLD = {"auto", "flashinfer_cutlass", "flashinfer_cudnn", "cutlass", "marlin"}
SM120_NEW = SM120_OLD | {"flashinfer_b12x"}
HOPPER_LINEAR = {"auto", "marlin"}

LINEAR_TABLE = [
    (SM100, V024, SM100_LINEAR), (SM100, V030, SM100_LINEAR), (SM100, V033, SM100_LINEAR),
    (SM100, V034, SM100_LINEAR),
    (SM110, V024, SM110_LINEAR), (SM110, V030, SM110_LINEAR), (SM110, V033, SM110_LINEAR),
    (SM110, V034, SM110_LINEAR),
    (SM120, V024, SM120_OLD), (SM120, V030, SM120_NEW), (SM120, V033, SM120_NEW),
    (SM120, V034, SM120_NEW),
    (HOPPER, V024, HOPPER_LINEAR), (HOPPER, V030, HOPPER_LINEAR), (HOPPER, V033, HOPPER_LINEAR),
    (HOPPER, V034, HOPPER_LINEAR),
]
MOE_SM100 = {"moe:cutlass", "moe:flashinfer_cutlass", "moe:flashinfer_trtllm",
             "moe:flashinfer_cutedsl", "moe:marlin"}
MOE_TABLE = [
    (SM100, V024, MOE_SM100), (SM100, V034, MOE_SM100),
    (SM110, V024, {"moe:cutlass", "moe:marlin"}), (SM110, V030, {"moe:cutlass", "moe:marlin"}),
    (SM110, V033, {"moe:cutlass", "moe:marlin"}), (SM110, V034, {"moe:marlin"}),
    (SM120, V030, {"moe:cutlass", "moe:flashinfer_cutlass", "moe:marlin"}),
    (HOPPER, V033, {"moe:marlin"}),
]
ALL_LINEAR = {"flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_trtllm",
              "flashinfer_cudnn", "flashinfer_b12x", "cutlass", "marlin", "emulation", "fbgemm"}


@pytest.mark.parametrize(("cc", "version", "expected"), LINEAR_TABLE)
def test_linear_candidates_per_family_and_release(cc: tuple[int, int], version: Version,
                                                  expected: set[str]) -> None:
    plan = auto_candidates(version, cc)
    assert set(plan.names()) == expected
    # Every backend is either a candidate or left out with a reason naming it.
    left = dict(plan.left_out)
    assert set(left) | set(plan.names()) == ALL_LINEAR | {"auto"}
    assert not set(left) & set(plan.names())
    assert all(reason.startswith(f"{backend}:") for backend, reason in left.items())


@pytest.mark.parametrize(("cc", "version", "expected"), MOE_TABLE)
def test_moe_candidates_per_family_and_release(cc: tuple[int, int], version: Version,
                                               expected: set[str]) -> None:
    names = set(auto_candidates(version, cc, moe=True).names())
    assert {n for n in names if n.startswith("moe:")} == expected


def test_each_candidate_is_written_in_the_release_form() -> None:
    old = {c.name: c for c in auto_candidates(V024, SM100).candidates}
    assert old["flashinfer_cutedsl"].args == ("--linear-backend", "flashinfer_cutedsl")
    assert "ALL quantized linear layers" in (old["cutlass"].warning or "")
    new = {c.name: c for c in auto_candidates(V034, SM120).candidates}
    flag, value = new["flashinfer_b12x"].args
    assert flag == "--kernel-config"
    assert json.loads(value) == {"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_b12x"}}
    assert new["auto"].args == () and new["auto"].env == ()
    moe = {c.name: c for c in auto_candidates(V030, SM100, moe=True).candidates}
    assert moe["moe:flashinfer_trtllm"].args == ("--moe-backend", "flashinfer_trtllm")


def test_the_reasons_say_what_is_missing() -> None:
    left = dict(auto_candidates(V034, SM120).left_out)
    assert left["flashinfer_trtllm"] == (
        "flashinfer_trtllm: needs family sm100, this GPU is sm120 (SM120-family)")
    assert "needs family sm100" in left["flashinfer_cutedsl"]
    assert "debugging" in left["emulation"]
    assert dict(auto_candidates(V024, SM120).left_out)["flashinfer_b12x"] == (
        "flashinfer_b12x: vLLM 0.24.0 has no way to select it")
    assert "needs family sm120" in dict(auto_candidates(V030, SM100).left_out)["flashinfer_b12x"]
    thor = dict(auto_candidates(V034, SM110, moe=True).left_out)
    assert "no longer runs its CUTLASS NVFP4 MoE" in thor["moe:cutlass"]
    # Thor under its pre-CUDA-13 number: FlashInfer lists no FP4 GEMM for 10.1.
    pre13 = dict(auto_candidates(V034, (10, 1)).left_out)
    assert "does not list compute capability 10.1" in pre13["flashinfer_cutlass"]
