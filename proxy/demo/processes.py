"""Child processes of the demo (simulated backends, the proxy) on loopback ports.

Each child is a `python -m proxy ...` of this same installation, so the demo
exercises the real command lines. Each child's log (stderr) goes to its own file,
never to a pipe nobody reads while the demo runs: a chatty child would fill the
pipe and block. Children are always terminated, then killed if they do not exit
in time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import proxy

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_SIM_READY = re.compile(r"listening on (http://[\d.]+:\d+)")


class DemoError(RuntimeError):
    """A part of the demo could not start or answer (message says which and why)."""


@dataclass
class Child:
    """A started child process and the URL it serves."""

    name: str
    process: subprocess.Popen[str]
    url: str
    log_path: Path
    admin_url: str | None = None

    def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not exit after SIGTERM; killing it", self.name)
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        return self.process.returncode


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def child_env() -> dict[str, str]:
    """This environment, with this `proxy` package importable from any working directory."""
    root = str(Path(proxy.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _spawn(argv: Sequence[str], capture_stdout: bool, log_path: Path) -> subprocess.Popen[str]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log_file:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "proxy", "--log-level", "WARNING", *argv],
            stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
            stderr=log_file,
            text=True,
            env=child_env(),
        )


def _failure(name: str, process: subprocess.Popen[str], log_path: Path) -> DemoError:
    err = ""
    if process.poll() is not None:
        err = log_path.read_text(encoding="utf-8", errors="replace")[-2000:].strip()
    return DemoError(f"{name} did not start (exit {process.returncode}): {err} "
                     f"(log: {log_path})")


def spawn_sim(knobs: Sequence[str], log_path: Path) -> subprocess.Popen[str]:
    """`vllm-cutover sim --port 0 KNOBS`, logging to `log_path`; pair with `sim_ready`
    (start several, then wait). Its stdout carries only the ready line."""
    return _spawn(["sim", "--host", LOOPBACK, "--port", "0", *knobs],
                  capture_stdout=True, log_path=log_path)


def sim_ready(name: str, process: subprocess.Popen[str], log_path: Path,
              timeout_s: float = 20.0) -> Child:
    """Wait for the simulator's ready line and read its URL from it."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    match = _SIM_READY.search(process.stdout.readline()) if ready else None
    if match is None:
        process.kill()
        process.wait()
        raise _failure(name, process, log_path)
    return Child(name, process, match.group(1), log_path)


def start_proxy(argv: Sequence[str], port: int, admin_port: int, log_path: Path) -> Child:
    process = _spawn(
        ["proxy", "--host", LOOPBACK, "--port", str(port), "--admin-port", str(admin_port),
         *argv],
        capture_stdout=False,
        log_path=log_path,
    )
    return Child("proxy", process, f"http://{LOOPBACK}:{port}", log_path,
                 f"http://{LOOPBACK}:{admin_port}")


async def wait_http(child: Child, url: str, timeout_s: float = 20.0) -> None:
    """Poll `url` until it answers any HTTP status; fail early if the child exits."""
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise _failure(child.name, child.process, child.log_path)
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                await asyncio.sleep(0.1)
    raise DemoError(f"{child.name} did not answer {url} within {timeout_s:g} s")
