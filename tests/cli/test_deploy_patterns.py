"""Two deploy-script patterns with deliberate kernel workarounds (deploy_patterns/), through
`launch` and `scan --fix` at both policies for targets 0.22, 0.24, 0.30 and 0.32: a choice
vLLM still offers keeps its meaning, an opt-out of FlashInfer MoE becomes an explicit
non-FlashInfer --moe-backend, nothing is removed silently. Marked `vllm`: the real vLLM 0.32
parser accepts every resulting command."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.launcher.validate import validate_arg_sets
from proxy.scan.shell import split_commands

PATTERNS = Path(__file__).parent / "deploy_patterns"
TARGETS = ["0.22", "0.24", "0.30", "0.32"]
POLICIES = ["migrate", "preserve"]
CC = {"docker-run.sh": "12.0", "spark.sh": "12.1"}
MARLIN_KC = '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}'


def _linear_marlin(target: str) -> list[str]:
    return ["--kernel-config", MARLIN_KC] if target >= "0.30" else ["--linear-backend", "marlin"]


def _pair(assignment: str) -> tuple[str, str]:
    name, _, value = assignment.partition("=")
    return name, value


def command_of(text: str) -> tuple[dict[str, str], list[str]]:
    """The environment and vLLM arguments a script starts vLLM with."""
    env: dict[str, str] = {}
    for words in split_commands(text):
        texts = [w.text for w in words]
        if texts[0] == "export":
            env.update(_pair(t) for t in texts[1:])
        elif texts[0] == "docker":
            env.update(_pair(texts[i + 1]) for i, t in enumerate(texts) if t == "-e")
            image = next(i for i, t in enumerate(texts) if t.startswith("vllm/vllm-openai"))
            return env, texts[image + 1:]
        elif texts[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]:
            return env, texts[3:]
    raise AssertionError(f"no vLLM command in {text!r}")


def _launch(script: str, target: str, policy: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch, cc: str | None = None) -> dict[str, Any]:
    env, args = command_of((PATTERNS / script).read_text())
    for name in [k for k in os.environ if k.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    report = tmp_path / f"{script}-{target}-{policy}-{cc}.json"
    assert main(["launch", "--dry-run", "--no-preflight", "--no-validate", "--vllm-version",
                 target, "--compute-capability", cc or CC[script], "--policy", policy,
                 "--report-json", str(report), "--", *args]) == 0
    return json.loads(report.read_text())


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("target", TARGETS)
def test_launch_docker_run_keeps_every_workaround(target: str, policy: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    report = _launch("docker-run.sh", target, policy, tmp_path, monkeypatch)
    argv = report["argv"]
    tail = argv[argv.index("--model"):]
    assert tail == ["--model", "/models/moe-nvfp4", "--moe-backend", "triton",
                    *_linear_marlin(target)]
    assert report["env"] == {}  # both removed variables are gone, none silently
    changes = {c["old"]: c for c in report["changes"] if c["kind"] != "warning"}
    marlin = changes["VLLM_NVFP4_GEMM_BACKEND=marlin"]
    assert marlin["new"] == shlex.join(_linear_marlin(target))
    assert "explicit choice keeps its meaning" in marlin["reason"]
    opt_out = changes["VLLM_USE_FLASHINFER_MOE_FP4=0"]
    assert opt_out["new"] is None and "--moe-backend triton is no FlashInfer kernel" in (
        opt_out["reason"])
    assert not [c for c in report["changes"] if c["kind"] == "warning" and "wins" in c["reason"]]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("target", TARGETS)
def test_launch_spark_opt_out_becomes_moe_backend_cutlass(
        target: str, policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _launch("spark.sh", target, policy, tmp_path, monkeypatch)
    assert report["argv"][-2:] == ["--moe-backend", "cutlass"]
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in report["env"]
    (change,) = [c for c in report["changes"] if c["old"] == "VLLM_USE_FLASHINFER_MOE_FP4=0"]
    assert change["new"] == "--moe-backend cutlass"
    assert "keeps FlashInfer out" in change["reason"] and change["manual"] is None


def _scan_fix(script: str, target: str, policy: str, tmp_path: Path,
              capsys: pytest.CaptureFixture[str], *extra: str
              ) -> tuple[Path, list[dict[str, Any]]]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / script
    shutil.copy(PATTERNS / script, path)
    capsys.readouterr()
    code = main(["scan", str(path), "--fix", "--json", "--target-version", target, "--policy",
                 policy, "--compute-capability", CC[script], *extra])
    rows = json.loads(capsys.readouterr().out)
    assert code == (1 if any(r["status"] == "manual" for r in rows) else 0)
    return path, rows


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("target", TARGETS)
def test_scan_fix_docker_run(target: str, policy: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    path, rows = _scan_fix("docker-run.sh", target, policy, tmp_path, capsys, "--bump-image")
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4", "vllm"}
    # the script's image runs vLLM 0.18.1: bumped to the target in the same edit
    image = by_name["vllm"]
    assert (image["kind"], image["status"], image["value"], image["fix"]) == (
        "image", "fixed", "vllm/vllm-openai:v0.18.1", f"vllm/vllm-openai:v{target}.0")
    # the opt-out goes: the command already names a non-FlashInfer --moe-backend
    assert by_name["VLLM_USE_FLASHINFER_MOE_FP4"]["status"] == "fixed"
    # Marlin stays Marlin; a variable that becomes a flag is written by hand
    marlin = by_name["VLLM_NVFP4_GEMM_BACKEND"]
    assert marlin["status"] == "manual" and marlin["fix"] == shlex.join(_linear_marlin(target))
    text = path.read_text()
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in text and "--moe-backend triton" in text
    assert text == (PATTERNS / "docker-run.sh").read_text().replace(
        "  -e VLLM_USE_FLASHINFER_MOE_FP4=0 \\\n", "").replace("v0.18.1", f"v{target}.0")


@pytest.mark.parametrize("target", ["0.22", "0.32"])
def test_scan_fix_leaves_a_file_whose_image_is_older_than_the_target(
        target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, rows = _scan_fix("docker-run.sh", target, "migrate", tmp_path, capsys)
    assert path.read_text() == (PATTERNS / "docker-run.sh").read_text()
    assert all(r["status"] == "manual" for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert "bump-image" in by_name["vllm"]["note"]
    assert "runs vLLM 0.18.1, older than the target" in by_name["vllm"]["reason"]
    opt_out = by_name["VLLM_USE_FLASHINFER_MOE_FP4"]
    assert opt_out["note"].startswith("not rewritten: vllm/vllm-openai:v0.18.1 runs vLLM 0.18.1")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("target", TARGETS)
def test_scan_fix_spark_never_drops_the_opt_out(target: str, policy: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path, rows = _scan_fix("spark.sh", target, policy, tmp_path, capsys)
    (row,) = rows
    assert (row["name"], row["status"], row["fix"]) == (
        "VLLM_USE_FLASHINFER_MOE_FP4", "manual", "--moe-backend cutlass")
    assert "vLLM flag" in row["note"]
    assert path.read_text() == (PATTERNS / "spark.sh").read_text()  # left for the hand edit


@pytest.mark.vllm
def test_real_vllm_032_parser_accepts_the_results(
        vllm_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    arg_sets: list[list[str]] = []
    moe_values = set()
    runs = [(script, policy, CC[script]) for script in CC for policy in POLICIES]
    for script, policy, cc in runs + [("spark.sh", "migrate", "9.0")]:
        report = _launch(script, "0.32.0", policy, tmp_path, monkeypatch, cc)
        argv = report["argv"]
        arg_sets.append(argv[argv.index("--model"):])
        moe_values.add(argv[argv.index("--moe-backend") + 1])
        if cc != CC[script]:
            continue
        # what `scan --fix` wrote plus its manual edits, as the operator would make them
        path, rows = _scan_fix(script, "0.32", policy, tmp_path / policy, capsys,
                               "--bump-image")
        assert "vllm/vllm-openai:v0.18.1" not in path.read_text()
        manual = [w for r in rows if r["status"] == "manual" for w in shlex.split(r["fix"])]
        arg_sets.append(command_of(path.read_text())[1] + manual)
    assert moe_values == {"triton", "cutlass", "marlin"}  # marlin: the 9.0 run
    results = validate_arg_sets(vllm_python, arg_sets)
    for args, result in zip(arg_sets, results):
        assert result.ok and result.skipped_reason is None, (args, result.errors)
        assert result.vllm_version == "0.32.0"
