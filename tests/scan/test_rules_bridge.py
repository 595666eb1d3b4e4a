"""The scanner against the launcher's real rule table, across target versions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from proxy.scan.findings import scan_text
from proxy.scan.rules_bridge import make_translate
from proxy.scan.scanner import scan_paths

FIXTURES = Path(__file__).parent / "fixtures"
CUTEDSL = '{"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutedsl"}}'


def _findings(kind: str, text: str, target: str, cc: tuple[int, int] | None = (10, 0)):  # type: ignore[no-untyped-def]
    return scan_text("f", kind, text, make_translate(target, "migrate", cc))


def test_guide_flag_becomes_kernel_config_on_sm100() -> None:
    [(finding, plan)] = _findings("shell", "vllm serve m --fp4-gemm-backend cutlass\n", "0.33")
    assert finding.fix == f"--kernel-config '{CUTEDSL}'"
    assert finding.status == "fixable" and plan is not None


def test_env_var_mapping_to_a_flag_is_manual_not_guessed() -> None:
    text = "services:\n  a:\n    environment:\n      VLLM_NVFP4_GEMM_BACKEND: cutlass\n"
    [(finding, plan)] = _findings("yaml", text, "0.32", None)
    assert finding.status == "manual" and plan is None
    assert finding.fix.startswith("--kernel-config")
    assert "vLLM flag" in finding.note


def test_old_env_var_renamed_in_place_for_021_keeps_trtllm() -> None:
    text = "env:\n  - name: VLLM_USE_TRTLLM_FP4_GEMM\n    value: \"1\"\n"
    [(finding, plan)] = _findings("yaml", text, "0.21")
    assert finding.fix == "VLLM_NVFP4_GEMM_BACKEND=flashinfer-trtllm"
    assert "explicit choice keeps its meaning" in finding.reason
    assert plan is not None


def test_setting_still_valid_for_target_is_not_reported() -> None:
    assert _findings("env", "VLLM_NVFP4_GEMM_BACKEND=cutlass\n", "0.15") == []


def test_unknown_value_is_reported_with_the_value_quoted() -> None:
    [(finding, plan)] = _findings("shell", "vllm serve m --fp4-gemm-backend turbo\n", "0.33")
    assert plan is None and finding.status == "manual" and "'turbo'" in finding.note


def test_bad_target_version_quoted() -> None:
    with pytest.raises(ValueError, match="banana"):
        make_translate("banana", "migrate", None)


def test_targets_outside_the_tables_are_handled_as_the_launcher_does() -> None:
    text = "vllm serve m --fp4-gemm-backend cutlass\n"
    for newer in ("0.35", "1.0.0"):
        [(finding, plan)] = _findings("shell", text, newer)
        assert finding.fix == f"--kernel-config '{CUTEDSL}'" and plan is not None
    [(finding, plan)] = _findings("shell", text, "0.9")  # placed by the ranges: no way there
    assert plan is None and finding.status == "manual"
    assert "no equivalent of --fp4-gemm-backend cutlass in vLLM 0.9.0" in finding.note
    assert _findings("shell", "vllm serve m --max-model-len 4096\n", "0.35") == []


@pytest.mark.parametrize("target", ["0.11.0", "0.15", "0.21", "0.22", "0.28", "0.30", "0.33", "0.34"])
@pytest.mark.parametrize("cc", [None, (10, 0), (12, 0), (9, 0)])
def test_fix_round_trip_every_version(tmp_path: Path, target: str,
                                      cc: tuple[int, int] | None) -> None:
    root = tmp_path / "deploy"
    shutil.copytree(FIXTURES, root)
    translate = make_translate(target, "migrate", cc)
    report = scan_paths([root], translate, fix=True)
    assert not report.errors
    for result in report.files:
        if result.backup:
            assert Path(result.backup).read_bytes() == (FIXTURES / Path(result.path).name).read_bytes()
    again = scan_paths([root], translate)
    assert not [f for f in again.findings if f.status == "fixable"]
    for path in root.glob("*.y*ml"):
        list(yaml.safe_load_all(path.read_text()))


def test_preserve_policy_keeps_cutlass() -> None:
    translate = make_translate("0.33", "preserve", (10, 0))
    [(finding, _)] = scan_text("f", "shell", "vllm serve m --fp4-gemm-backend cutlass\n", translate)
    assert finding.fix == """--kernel-config '{"linear_backend_per_quant": {"nvfp4_w4a4": "cutlass"}}'"""


def test_fixed_dockerfile_exec_forms_stay_json(tmp_path: Path) -> None:
    import json

    dockerfile = tmp_path / "Dockerfile"
    shutil.copy(FIXTURES / "Dockerfile", dockerfile)
    report = scan_paths([dockerfile], make_translate("0.30", "migrate", (12, 0)), fix=True)
    assert report.fixed
    text = dockerfile.read_text()
    entrypoint = next(line for line in text.splitlines() if line.startswith("ENTRYPOINT"))
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT ")) == [
        "vllm", "serve", "nvidia/Llama-3.1-8B-Instruct-FP4", "--kernel-config",
        '{"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}']


@pytest.mark.parametrize(("script", "fix", "status"), [
    # the export reaches a vLLM command that already names a non-FlashInfer --moe-backend
    ("export VLLM_USE_FLASHINFER_MOE_FP4=0\nvllm serve m --moe-backend marlin\n",
     "remove it", "fixable"),
    (("export VLLM_USE_FLASHINFER_MOE_FP4=0\npython -m vllm.entrypoints.openai.api_server "
      "--model m\n"), "--moe-backend cutlass", "manual"),
    # two vLLM commands read it differently: no single fix
    (("export VLLM_USE_FLASHINFER_MOE_FP4=0\nvllm serve m --moe-backend marlin\n"
      "vllm serve n --port 1\n"), "by hand", "manual"),
    # exports do not reach a container, nor a command before them
    ("export VLLM_USE_FLASHINFER_MOE_FP4=0\ndocker run img --moe-backend marlin\n",
     "--moe-backend cutlass", "manual"),
    ("vllm serve m --moe-backend marlin\nexport VLLM_USE_FLASHINFER_MOE_FP4=0\n",
     "--moe-backend cutlass", "manual"),
])
def test_exported_variable_is_read_with_the_vllm_commands_it_reaches(
        script: str, fix: str, status: str) -> None:
    [(finding, _)] = _findings("shell", script, "0.32", (12, 1))
    assert (finding.name, finding.fix, finding.status) == ("VLLM_USE_FLASHINFER_MOE_FP4", fix,
                                                           status)
