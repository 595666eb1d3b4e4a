"""Plans over target versions x entry forms x policies x GPU families, plus config files."""

from __future__ import annotations

import json
from itertools import product

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from proxy.launcher.command import API_SERVER_MODULE, Command, parse_command
from proxy.launcher.config_file import ConfigFile
from proxy.launcher.kernel_config import KernelConfigError
from proxy.launcher.planner import plan_launch
from proxy.launcher.rules import SOURCES

VERSIONS = ["0.10.0", "0.10.1", "0.11.0", "0.11.1", "0.15.0", "0.17.0", "0.20.0", "0.22.0",
            "0.23.0", "0.24.0", "0.28.0", "0.30.0", "0.32.0", "0.33.0"]
CAPABILITIES = [(10, 0), (12, 0), (9, 0), None]
GUIDE_ARGS = ["nvidia/Llama-3.1-8B-Instruct-FP4", "--quantization", "nvfp4",
              "--fp4-gemm-backend", "cutlass", "--port", "8000"]
OLD_ENV = {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "latency",
           "VLLM_USE_FBGEMM": "0", "HOME": "/home/u"}
FOREIGN = {"--fp4-gemm-backend", "--moe-runner-backend", "--quantization"}


def _entry(form: str) -> Command:
    argv = {"serve": ["vllm", "serve", *GUIDE_ARGS],
            "module": ["python3", "-m", API_SERVER_MODULE, *GUIDE_ARGS],
            "bare": list(GUIDE_ARGS)}[form]
    return parse_command(argv, is_program=lambda w: False)


def _accepted_env(target: Version) -> set[str]:
    return {s.name for s in SOURCES if s.kind == "env" and s.accepted.contains(target)}


@pytest.mark.parametrize(("version", "form", "policy", "cc"),
                         list(product(VERSIONS, ["serve", "module", "bare"],
                                      ["migrate", "preserve"], CAPABILITIES)))
def test_guide_command_everywhere(version: str, form: str, policy, cc) -> None:
    target = Version(version)
    command = _entry(form)
    plan = plan_launch(command, OLD_ENV, None, target=target, compute_capability=cc,
                       policy=policy)
    assert not FOREIGN & set(plan.args), plan.args
    assert plan.args[0] == "nvidia/Llama-3.1-8B-Instruct-FP4"
    assert "--port" in plan.args and plan.env["HOME"] == "/home/u"
    leftover = {k for k in plan.env if k.startswith("VLLM_")} - _accepted_env(target)
    assert not leftover, f"removed env vars left behind: {leftover}"
    assert all(c.reason for c in plan.changes)
    linear = plan.linear_backend
    if target >= Version("0.30"):
        assert "--kernel-config" in plan.args and "--linear-backend" not in plan.args
        assert json.loads(plan.args[plan.args.index("--kernel-config") + 1]) == {
            "linear_backend_per_quant": {"nvfp4_w4a4": linear}}
    elif target >= Version("0.22"):
        assert plan.args[plan.args.index("--linear-backend") + 1] == linear
    elif target >= Version("0.11.1") and linear is not None:
        assert plan.env["VLLM_NVFP4_GEMM_BACKEND"] == linear.replace("_", "-")
    if target >= Version("0.22"):  # env deprecated from 0.22: the flag (from 0.17) takes over
        assert plan.args[plan.args.index("--moe-backend") + 1] == "flashinfer_trtllm"
    else:
        assert plan.env["VLLM_USE_FLASHINFER_MOE_FP4"] == "1"
        assert "--moe-backend" not in plan.args


EXPECTED_LINEAR = [
    # (version, policy, cc) -> effective NVFP4 linear backend (None: left to vLLM)
    ("0.10.0", "migrate", (10, 0), None),
    ("0.11.1", "migrate", (10, 0), "flashinfer_cutlass"),
    ("0.11.1", "migrate", (9, 0), None),
    ("0.15.0", "migrate", (9, 0), "marlin"),
    ("0.23.0", "migrate", (10, 0), "flashinfer_cutlass"),
    ("0.24.0", "migrate", (10, 0), "flashinfer_cutedsl"),
    ("0.24.0", "migrate", (12, 0), "flashinfer_cutlass"),
    ("0.32.0", "migrate", None, "flashinfer_cutlass"),
    ("0.32.0", "preserve", (10, 0), "cutlass"),
    ("0.33.0", "migrate", (9, 0), "marlin"),
]


@pytest.mark.parametrize(("version", "policy", "cc", "expected"), EXPECTED_LINEAR)
def test_chosen_linear_backend(version: str, policy, cc, expected) -> None:
    plan = plan_launch(_entry("serve"), {}, None, target=Version(version),
                       compute_capability=cc, policy=policy)
    assert plan.linear_backend == expected


def test_user_new_style_wins_and_is_untouched() -> None:
    command = parse_command(["vllm", "serve", "m", "--linear-backend=marlin",
                             "--fp4-gemm-backend", "cutlass"], is_program=lambda w: False)
    plan = plan_launch(command, {}, None, target=Version("0.28.0"), compute_capability=(10, 0),
                       policy="migrate")
    assert plan.args == ("m", "--linear-backend=marlin")
    assert plan.linear_backend == "marlin"
    assert any(c.kind == "warning" and "wins" in c.reason for c in plan.changes)


def test_kernel_config_is_merged_with_users_own() -> None:
    command = parse_command(["vllm", "serve", "m", "--fp4-gemm-backend", "cutlass",
                             "--kernel-config", '{"moe_backend": "marlin"}'],
                            is_program=lambda w: False)
    plan = plan_launch(command, {}, None, target=Version("0.32.0"), compute_capability=(12, 0),
                       policy="migrate")
    assert plan.args.count("--kernel-config") == 1
    merged = json.loads(plan.args[plan.args.index("--kernel-config") + 1])
    assert merged == {"moe_backend": "marlin",
                      "linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}


@pytest.mark.parametrize("users", ["{not json", '{"linear_backend_per_quant": "oops"}', "[]",
                                   '{"linear_backend_per_quant": {"nvfp4_w4a4": 1}}', "",
                                   "[" * 100_000])
@pytest.mark.parametrize("ours", [[], ["--fp4-gemm-backend", "cutlass"]])
def test_a_kernel_config_vllm_would_refuse_is_refused(users: str, ours: list[str]) -> None:
    command = parse_command(["vllm", "serve", "m", *ours, "--kernel-config", users],
                            is_program=lambda w: False)
    with pytest.raises(KernelConfigError) as refused:
        plan_launch(command, {}, None, target=Version("0.32.0"), compute_capability=(10, 0),
                    policy="migrate")
    assert repr(users)[:40] in str(refused.value)


def test_a_kernel_config_in_the_config_file_is_checked() -> None:
    command = parse_command(["vllm", "serve", "m", "--config", "c.yaml"],
                            is_program=lambda w: False)
    config = ConfigFile("c.yaml", {"kernel_config": {"linear_backend_per_quant": ["marlin"]}})
    with pytest.raises(KernelConfigError, match=r"--config 'c.yaml': kernel_config: .*marlin"):
        plan_launch(command, {}, config, target=Version("0.32.0"), compute_capability=(10, 0),
                    policy="migrate")


def test_the_commands_kernel_config_takes_the_entry_for_a_config_key() -> None:
    # vLLM lets the command's --kernel-config replace the file's: the entry goes there.
    command = parse_command(["vllm", "serve", "m", "--config", "c.yaml", "--kernel-config",
                             '{"moe_backend": "marlin"}'], is_program=lambda w: False)
    config = ConfigFile("c.yaml", {"fp4-gemm-backend": "cutlass"})
    plan = plan_launch(command, {}, config, target=Version("0.32.0"), compute_capability=(12, 0),
                       policy="migrate", config_out_path="o.yaml")
    assert plan.args.count("--kernel-config") == 1 and plan.config_contents == {}
    assert json.loads(plan.args[plan.args.index("--kernel-config") + 1]) == {
        "moe_backend": "marlin", "linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}


def test_env_translation_to_flag_lands_in_args() -> None:
    command = parse_command(["vllm", "serve", "m"], is_program=lambda w: False)
    plan = plan_launch(command, {"VLLM_NVFP4_GEMM_BACKEND": "flashinfer-trtllm"}, None,
                       target=Version("0.22.0"), compute_capability=(10, 0), policy="preserve")
    assert plan.args == ("m", "--linear-backend", "flashinfer_trtllm")
    assert "VLLM_NVFP4_GEMM_BACKEND" not in plan.env


def test_config_keys_go_to_a_new_file_and_cli_wins_over_config() -> None:
    command = parse_command(["vllm", "serve", "m", "--config", "/etc/serve.yaml"],
                            is_program=lambda w: False)
    config = ConfigFile("/etc/serve.yaml", {"port": 8000, "fp4-gemm-backend": "cutlass",
                                            "quantization": "nvfp4",
                                            "moe_runner_backend": "flashinfer_cutlass"})
    plan = plan_launch(command, {}, config, target=Version("0.24.0"), compute_capability=(10, 0),
                       policy="migrate", config_out_path="/tmp/x/serve.vllm-cutover.yaml")
    assert plan.args == ("m", "--config", "/tmp/x/serve.vllm-cutover.yaml")
    assert plan.config_contents == {"port": 8000, "linear-backend": "flashinfer_cutedsl",
                                    "moe-backend": "flashinfer_cutlass"}
    assert dict(config.contents)["fp4-gemm-backend"] == "cutlass"  # the user's data untouched


def test_config_untouched_when_nothing_to_translate() -> None:
    command = parse_command(["vllm", "serve", "m", "--config=/etc/serve.yaml"],
                            is_program=lambda w: False)
    plan = plan_launch(command, {}, ConfigFile("/etc/serve.yaml", {"port": 1}),
                       target=Version("0.32.0"), compute_capability=None, policy="migrate",
                       config_out_path="/tmp/out.yaml")
    assert plan.config_contents is None and plan.args == ("m", "--config=/etc/serve.yaml")


def test_flag_in_command_line_beats_config_key() -> None:
    command = parse_command(["vllm", "serve", "m", "--config", "c.yaml",
                             "--fp4-gemm-backend", "flashinfer_cudnn"], is_program=lambda w: False)
    config = ConfigFile("c.yaml", {"fp4-gemm-backend": "cutlass"})
    plan = plan_launch(command, {}, config, target=Version("0.22.0"), compute_capability=(10, 0),
                       policy="preserve", config_out_path="o.yaml")
    assert plan.linear_backend == "flashinfer_cudnn"
    assert plan.config_contents == {}


def test_supported_range_matches_table_sources() -> None:
    assert all(isinstance(s.accepted, SpecifierSet) for s in SOURCES)


def test_own_variables_do_not_reach_vllm() -> None:
    command = parse_command(["vllm", "serve", "m"], is_program=lambda w: False)
    plan = plan_launch(command, {"VLLM_CUTOVER_VLLM_PYTHON": "/p", "VLLM_LOGGING_LEVEL": "INFO"},
                       None, target=Version("0.32.0"), compute_capability=None, policy="migrate")
    assert dict(plan.env) == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert plan.changes[-1].old == "VLLM_CUTOVER_VLLM_PYTHON=/p"
