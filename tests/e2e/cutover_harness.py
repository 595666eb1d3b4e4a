"""What the cutover's end-to-end tests share: a proxy process that owns a cutover, steady
client load in a thread, the `vllm-cutover cutover` CLI run as a user runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.demo.steady import SteadyLoad, SteadyResult
from tests.e2e.proxy_fixtures import ADMIN_TOKEN, http_request, wait_for
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

if TYPE_CHECKING:
    from typing_extensions import Self

REPO_ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("done", "aborted", "rolled_back", "failed")


@dataclass
class CutoverProxy:
    """`vllm-cutover proxy --driver docker` as a process that can be killed and restarted
    with the same command line (same ports, records and state file)."""

    work_dir: Path
    primary: str
    extra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    # Tails are not judged: on two cores shared by the clients, the proxy and both engines,
    # p99 ratios of identical engines swing past 1.25 (README: "Latency is timed where the
    # bytes arrive"); these tests prove the switch. () judges at the default settings.
    gate_args: Sequence[str] = ("--gate-max-ttft-p99-ratio", "0",
                                "--gate-max-tpot-p99-ratio", "0",
                                "--gate-max-tpot-unstreamed-p99-ratio", "0")
    driver: str | None = "docker"  # None: adopt mode only (the new backend already runs)
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    process: ServerProcess | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "proxy", "--log-level", "INFO", "proxy",
                "--host", HOST, "--port", str(self.port), "--primary", self.primary,
                "--db", str(self.work_dir / "records.sqlite"),
                "--admin-port", str(self.admin_port), "--admin-token", ADMIN_TOKEN,
                *(("--driver", self.driver) if self.driver else ()),
                *self.gate_args, *self.extra_args]

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.process = spawn(self.argv(), port=self.port,
                             log_path=self.work_dir / f"proxy-{self.starts}.log",
                             env={"PYTHONPATH": str(REPO_ROOT), **self.env})
        ServerProcess(self.process.proc, self.admin_url,
                      self.process.log_path).wait_ready(90, "/admin/routes")

    def kill(self) -> None:
        """SIGKILL the proxy and its capture worker: nothing gets to clean up."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.proc.wait(30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=20)
            self.process = None

    def log_tail(self) -> str:
        return self.process.log_tail(60) if self.process is not None else ""

    def routes(self) -> dict[str, Any]:
        return dict(http_request("GET", self.admin_url + "/admin/routes").json())

    def status(self, token: bool = True) -> dict[str, Any]:
        """GET /admin/cutover, as the operator (with the token: the log tail is shown)."""
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if token else None
        answer = http_request("GET", self.admin_url + "/admin/cutover", headers=headers)
        assert answer.status == 200, (answer.status, answer.body[:500])
        return dict(answer.json())

    def wait_phase(self, phases: Sequence[str], timeout_s: float) -> dict[str, Any]:
        """The status once its phase is one of `phases`; fails early on an unexpected end."""
        def probe() -> dict[str, Any] | None:
            status = self.status()
            phase = status.get("phase")
            if phase in phases:
                return status
            if phase in TERMINAL and status.get("terminal", True):  # not with a command pending
                raise AssertionError(f"cutover ended in {phase!r}, not {phases!r}: "
                                     f"{json.dumps(status, indent=1)[:3000]}\n"
                                     f"{self.log_tail()}")
            return None

        return wait_for(probe, timeout_s, f"cutover phase in {list(phases)}", every_s=0.5)


def cutover_cli(proxy: CutoverProxy, *args: str, timeout_s: float = 120,
                token: str | None = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
    """`python -m proxy cutover ARGS --proxy-admin URL` with the token in the environment."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("VLLM_CUTOVER_ADMIN_TOKEN", None)
    if token is not None:
        env["VLLM_CUTOVER_ADMIN_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "proxy", "cutover", args[0], "--proxy-admin", proxy.admin_url,
         *args[1:]], capture_output=True, text=True, timeout=timeout_s, env=env,
        check=False, cwd=REPO_ROOT)


class LoadThread:
    """SteadyLoad on its own event loop in a thread, so a synchronous test can drive the
    cutover while `clients` requests stream through the proxy."""

    def __init__(self, url: str, model: str, clients: int = 32, max_tokens: int = 24,
                 stream: bool | None = None, pause_s: float = 0.0) -> None:
        self.load = SteadyLoad(url, model, clients=clients, max_tokens=max_tokens,
                               stream=stream, pause_s=pause_s)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._result: SteadyResult | None = None
        self._thread = threading.Thread(target=self._run, name="steady-load", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._result = self._loop.run_until_complete(self.load.run(self._stop))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.stop()

    @property
    def count(self) -> int:
        return len(self.load.result.outcomes)

    def stop(self, timeout_s: float = 180.0) -> SteadyResult:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the load did not stop"
        assert self._result is not None
        return self._result


def wait_count(load: LoadThread, at_least: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while load.count < at_least:
        assert time.monotonic() < deadline, f"only {load.count} of {at_least} requests done"
        time.sleep(0.2)


def assert_promoted_on_pass(status: dict[str, Any]) -> None:
    """The cutover's history has a promotion, made on a passing gate. (The status's own
    `verdict` at `done` is the post-promotion window's, which a window of a few seconds
    may leave inconclusive.)"""
    promoting = [step for step in status["history"] if step["to"] == "promoting"]
    assert promoting, [step["to"] for step in status["history"]]
    assert promoting[0]["reason"].startswith("gate pass"), promoting[0]
