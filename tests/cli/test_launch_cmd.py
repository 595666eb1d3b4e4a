"""`vllm-cutover launch` end to end as a subprocess, against a fake `vllm` on PATH, and (marked
`vllm`) the translated arguments against the real parser of the installed vLLM."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ["nvidia/Llama-3.1-8B-Instruct-FP4", "--quantization", "nvfp4",
         "--fp4-gemm-backend", "cutlass"]
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then echo "${FAKE_VLLM_VERSION:-0.24.0}"; exit 0; fi
if [ "$1" = "-I" ]; then echo "${FAKE_FLASHINFER_VERSION:-}"; exit 0; fi
touch "$FAKE_MARKER"
echo "EXEC $$ $*"
env | grep '^VLLM_' | sort
"""


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture()
def fake_vllm(tmp_path: Path) -> dict[str, str]:
    return make_fake_vllm(tmp_path)


def make_fake_vllm(tmp_path: Path) -> dict[str, str]:
    """A `vllm` script on PATH whose interpreter answers the version probe and echoes its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = _exe(bin_dir / "python3", FAKE_PYTHON)
    _exe(bin_dir / "vllm", f"#!{python}\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return {**clean, "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
            "FAKE_MARKER": str(tmp_path / "executed")}


def _launch(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", "launch", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60, check=False)


def test_a_report_that_cannot_be_written_stops_with_exit_3(tmp_path: Path,
                                                            fake_vllm: dict[str, str]) -> None:
    report_path = tmp_path / "no-such-dir" / "report.json"
    proc = _launch(["--dry-run", "--compute-capability", "10.0", "--no-validate",
                    "--report-json", str(report_path), "--", "vllm", "serve", *GUIDE], fake_vllm)
    assert proc.returncode == 3, proc.stderr
    assert f"--report-json '{report_path}': No such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr and not Path(fake_vllm["FAKE_MARKER"]).exists()


def test_dry_run_report(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    report_path = tmp_path / "report.json"
    env = {**fake_vllm, "VLLM_NVFP4_GEMM_BACKEND": "cutlass", "VLLM_LOGGING_LEVEL": "INFO"}
    proc = _launch(["--dry-run", "--compute-capability", "10.0", "--no-validate",
                    "--report-json", str(report_path), "--", "vllm", "serve", *GUIDE], env)
    assert proc.returncode == 0, proc.stderr
    assert not Path(fake_vllm["FAKE_MARKER"]).exists()
    assert proc.stdout.strip() == (
        "VLLM_LOGGING_LEVEL=INFO vllm serve nvidia/Llama-3.1-8B-Instruct-FP4 "
        "--linear-backend flashinfer_cutedsl")
    assert "--fp4-gemm-backend cutlass -> --linear-backend flashinfer_cutedsl (" in proc.stderr
    assert "--quantization nvfp4 -> (removed)" in proc.stderr
    report = json.loads(report_path.read_text())
    assert report["vllm_version"] == "0.24.0" and report["compute_capability"] == "10.0"
    assert report["policy"] == "migrate"
    assert report["argv"][-2:] == ["--linear-backend", "flashinfer_cutedsl"]
    assert report["env"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert {c["old"] for c in report["changes"]} >= {
        "--fp4-gemm-backend cutlass", "--quantization nvfp4", "VLLM_NVFP4_GEMM_BACKEND=cutlass"}
    assert report["preflight"]["ok"] is True  # informational on a host without CUDA
    # FlashInfer is looked up for vLLM's interpreter (this fake has none), not the launcher's.
    assert report["preflight"]["summary"]["flashinfer_version"] is None


def test_exec_runs_translated_command(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    # With the preflight on: a host without CUDA must not stop the launch.
    env = {**fake_vllm, "FAKE_VLLM_VERSION": "0.15.0"}
    proc = _launch(["--policy", "preserve", "--compute-capability", "9.0", "--no-validate",
                    "--", "vllm", "serve", *GUIDE], env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("vllm serve nvidia/Llama-3.1-8B-Instruct-FP4")
    assert "VLLM_NVFP4_GEMM_BACKEND=cutlass" in lines[1:]


def test_bare_arguments_use_the_api_server(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    python = fake_vllm["PATH"].split(":")[0] + "/python3"
    proc = _launch(["--dry-run", "--no-validate", "--no-preflight", "--vllm-python", python,
                    "--", *GUIDE], fake_vllm)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"{python} -m vllm.entrypoints.openai.api_server --model nvidia/Llama-3.1-8B-Instruct-FP4")


def test_config_file_copy(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    user = tmp_path / "serve.yaml"
    user.write_text("port: 8000\nfp4-gemm-backend: cutlass\n")
    out_dir = tmp_path / "out"
    proc = _launch(["--dry-run", "--no-validate", "--no-preflight", "--compute-capability", "12.0",
                    "--vllm-version", "0.32.0", "--config-out", str(out_dir), "--",
                    "vllm", "serve", "m", "--config", str(user)], fake_vllm)
    assert proc.returncode == 0, proc.stderr
    assert user.read_text() == "port: 8000\nfp4-gemm-backend: cutlass\n"
    copy = out_dir / "serve.vllm-cutover.yaml"
    assert f"--config {copy}" in proc.stdout
    assert "nvfp4_w4a4" in copy.read_text() and "fp4-gemm-backend" not in copy.read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--", "bash", "-c", "true"], "unknown entry form 'bash'"),
    (["--compute-capability", "abc", "--", "vllm", "serve", "m"], "'abc'"),
    (["--compute-capability", "99.9", "--", "vllm", "serve", "m"],
     "no GPU has compute capability '99.9'"),
    (["--compute-capability", "13", "--", "vllm", "serve", "m"], "no GPU has compute capability '13'"),
    (["--exec-prefix", "'python", "--", "m"], "--exec-prefix \"'python\": No closing quotation"),
    (["--vllm-version", "0.32.0", "--", "vllm", "serve", "m", "--kernel-config", "{not json"],
     "--kernel-config '{not json': not valid JSON"),
    (["--vllm-version", "0.32.0", "--compute-capability", "10.0", "--", "vllm", "serve", "m",
      "--fp4-gemm-backend", "cutlass", "--kernel-config", "{not json"], "'{not json'"),
    (["--vllm-version", "0.32.0", "--", "vllm", "serve", "m", "--fp4-gemm-backend", "cutlass",
      "--kernel-config", '{"linear_backend_per_quant": "oops"}'],
     "linear_backend_per_quant must map"),
    (["--strict-versions", "--vllm-version", "0.9.2", "--", "vllm", "serve", "m"],
     "0.9.2 is older than the launcher's tables (0.10.0 .. 0.34.x) and --strict-versions"),
    (["--vllm-version", "banana", "--", "vllm", "serve", "m"], "'banana'"),
    (["--", "vllm", "serve", "m", "--fp4-gemm-backend", "fastest"], "'fastest'"),
    (["--", "vllm", "serve", "m", "--config", "/nonexistent/x.yaml"], "/nonexistent/x.yaml"),
    ([], "no command"),
])
def test_bad_input_exits_3_and_runs_nothing(
    args: list[str], message: str, fake_vllm: dict[str, str],
) -> None:
    proc = _launch(["--no-validate", *args], fake_vllm)
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not Path(fake_vllm["FAKE_MARKER"]).exists()


def test_config_must_be_a_regular_file(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    fifo = tmp_path / "serve.yaml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    proc = _launch(["--dry-run", "--no-validate", "--no-preflight", "--vllm-version", "0.32.0",
                    "--", "vllm", "serve", "m", "--config", str(fifo)], fake_vllm)
    assert proc.returncode == 3 and f"--config {str(fifo)!r}: not a regular file" in proc.stderr


def test_a_temporary_directory_only_when_a_launch_needs_it(
        tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**fake_vllm, "TMPDIR": str(temp)}
    user = tmp_path / "serve.yaml"
    user.write_text("fp4-gemm-backend: cutlass\n")
    launch = ["--no-validate", "--no-preflight", "--vllm-version", "0.32.0",
              "--compute-capability", "10.0", "--", "vllm", "serve", "m", "--config", str(user)]
    proc = _launch(["--dry-run", *launch], env)
    assert proc.returncode == 0, proc.stderr
    assert "vllm-cutover-XXXXXXXX/serve.vllm-cutover.yaml" in proc.stdout
    assert "not written" in proc.stderr and not list(temp.iterdir())
    proc = _launch(launch, env)  # a real launch: vLLM reads the copy after the exec
    assert proc.returncode == 0, proc.stderr
    [made] = temp.iterdir()
    assert f"--config {made / 'serve.vllm-cutover.yaml'}" in proc.stdout
    made.joinpath("serve.vllm-cutover.yaml").unlink()
    made.rmdir()
    user.write_text("port: 8000\n")  # nothing to translate: no copy, no directory
    assert _launch(launch, env).returncode == 0 and not list(temp.iterdir())


def test_help_explains() -> None:
    proc = _launch(["--help"], {**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0
    for needle in ("--policy", "migrate", "preserve", "exit codes", "--kernel-config",
                   "vllm.entrypoints.openai.api_server"):
        assert needle in proc.stdout


PARSE = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
results = []
for args in json.loads(sys.argv[1]):
    parser = make_arg_parser(FlexibleArgumentParser())
    try:
        ns = parser.parse_args(args)
        results.append({"ok": True, "kernel_config": str(ns.kernel_config),
                        "moe_backend": ns.moe_backend})
    except SystemExit as exc:
        results.append({"ok": False, "code": exc.code})
print(json.dumps(results))
"""


@pytest.mark.vllm
def test_translated_args_pass_the_real_parser(tmp_path: Path, vllm_python: str) -> None:
    old = ["--model", "/models/tiny", *GUIDE[1:], "--moe-runner-backend", "flashinfer_cutlass"]
    translated = []
    for cc, policy in [("10.0", "migrate"), ("12.0", "migrate"), ("9.0", "migrate"),
                       ("10.0", "preserve")]:
        report = tmp_path / f"{cc}-{policy}.json"
        proc = _launch(["--dry-run", "--no-validate", "--no-preflight", "--compute-capability",
                        cc, "--policy", policy, "--report-json", str(report), "--",
                        vllm_python, "-m", "vllm.entrypoints.openai.api_server", *old],
                       {**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr
        data = json.loads(report.read_text())
        assert data["vllm_version"] == "0.32.0"
        translated.append(data["argv"][3:])
    config = tmp_path / "serve.yaml"
    config.write_text("fp4-gemm-backend: cutlass\nmax-model-len: 512\n")
    report = tmp_path / "config.json"
    proc = _launch(["--dry-run", "--no-validate", "--no-preflight", "--compute-capability",
                    "10.0", "--config-out", str(tmp_path / "out"), "--report-json", str(report),
                    "--", vllm_python, "-m", "vllm.entrypoints.openai.api_server",
                    "--model", "/models/tiny", "--config", str(config)],
                   {**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    translated.append(json.loads(report.read_text())["argv"][3:])
    proc = subprocess.run([vllm_python, "-c", PARSE, json.dumps([old, *translated])],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results[0] == {"ok": False, "code": 2}  # the old command fails as users saw
    assert all(r["ok"] for r in results[1:]), results
    assert "'nvfp4_w4a4': 'flashinfer_cutedsl'" in results[1]["kernel_config"]
    assert "'nvfp4_w4a4': 'marlin'" in results[3]["kernel_config"]
    assert "'nvfp4_w4a4': 'cutlass'" in results[4]["kernel_config"]
    assert results[1]["moe_backend"] == "flashinfer_cutlass"
    assert "'nvfp4_w4a4': 'flashinfer_cutedsl'" in results[5]["kernel_config"]  # from the YAML


def test_missing_program_is_a_clear_error(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    env = {**fake_vllm, "PATH": str(tmp_path / "empty")}
    proc = _launch(["--no-validate", "--no-preflight", "--vllm-version", "0.32.0", "--",
                    "vllm", "serve", "m"], env)
    assert proc.returncode == 127 and "cannot run 'vllm'" in proc.stderr
