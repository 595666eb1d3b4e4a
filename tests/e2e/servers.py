"""Real server processes for end-to-end tests: free ports, logs to a file, /health wait, kill.

Stdlib only (urllib, subprocess) so it runs in the dev venv without an event loop.
Every process starts in its own session: teardown signals that process group only, which
also takes vLLM's engine-core child with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
# vLLM on the CPU: ~30-60 s alone, minutes when other servers start beside it.
READY_TIMEOUT_S = 600.0

VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # "auto" pins every server's compute thread to core 0; let the OS spread them instead.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nobody listens on, never the same one twice in a session."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free loopback port after 50 tries")


def api_server_args(model_dir: Path, name: str, port: int) -> list[str]:
    """The api_server module arguments the tests use for the tiny model.

    --enforce-eager: torch.compile of even a tiny model costs minutes of CPU at start-up."""
    return [
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", name,
        "--host", HOST,
        "--port", str(port),
        "--dtype", "bfloat16",
        "--max-model-len", "512",
        "--enforce-eager",
    ]


@dataclass
class ServerProcess:
    """A started server: its Popen, loopback URL and log file."""

    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, path: str = "/health") -> None:
        """Poll `path` until 200; raise with the log tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} before ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if http_ok(self.url + path):
                return
            time.sleep(0.5)
        raise TimeoutError(
            f"{self.url}{path} not ready after {timeout_s:.0f} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Children (vLLM's engine core) may outlive a leader that already exited.
        _signal_group(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when GET `url` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def spawn(
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start `argv` in its own session with stdout+stderr to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **VLLM_ENV, **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=full_env, start_new_session=True,
        )
    return ServerProcess(proc=proc, url=f"http://{HOST}:{port}", log_path=log_path)


def post_json(url: str, body: Mapping[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    """POST a JSON body, return the decoded JSON answer (raises on non-2xx)."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return dict(json.loads(resp.read()))


def complete(
    base_url: str, model: str, prompt: str = "Hello world", max_tokens: int = 8
) -> dict[str, Any]:
    """A greedy /v1/completions request with token ids."""
    return post_json(base_url + "/v1/completions", {
        "model": model, "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "return_token_ids": True,
    })


def listening_pids(port: int) -> set[int]:
    """PIDs holding a listening TCP socket on `port` (from /proc: no psutil needed)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    pids: set[int] = set()
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            for fd in (proc_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    pids.add(int(proc_dir.name))
                    break
        except OSError:
            continue
    return pids


def process_environ(pid: int) -> dict[str, str]:
    """The environment a running process was started (or exec'd) with."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def process_cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
