"""Child processes of the benchmark: start pinned to CPUs, wait for their port, read RSS, stop."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Memory:
    """Resident set size now and its high-water mark, from /proc/PID/status."""

    rss_bytes: int
    hwm_bytes: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dead_port() -> int:
    """A loopback port with nothing listening (bound then released)."""
    return free_port()


def pinned(argv: Sequence[str], cpus: Sequence[int]) -> list[str]:
    """Prefix argv with taskset when CPUs are asked for and taskset exists (it execs: same PID)."""
    if cpus and shutil.which("taskset"):
        return ["taskset", "-c", ",".join(str(c) for c in cpus), *argv]
    return list(argv)


def at_idle_priority(argv: Sequence[str]) -> list[str]:
    """Prefix argv with `chrt --idle 0` (Linux SCHED_IDLE) where chrt exists (it execs too)."""
    if shutil.which("chrt"):
        return ["chrt", "--idle", "0", *argv]
    return list(argv)


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float, name: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s")


def memory(pid: int) -> Memory:
    """Summed over `pid` and its descendants (the proxy's capture worker): the high-water
    marks' sum bounds the peak of the sum from above."""
    fields = {"VmRSS": 0, "VmHWM": 0}
    for each in tree_pids(pid):
        try:
            lines = Path(f"/proc/{each}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key in fields:
                fields[key] += int(value.split()[0]) * 1024
    return Memory(rss_bytes=fields["VmRSS"], hwm_bytes=fields["VmHWM"])


@contextlib.contextmanager
def started(
    argv: Sequence[str],
    port: int,
    name: str,
    log_dir: Path,
    timeout_s: float = 30.0,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server process, wait until it listens on `port`, stop it on exit."""
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
        )
    try:
        try:
            wait_port(port, proc, timeout_s, name)
        except RuntimeError as exc:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; log tail:\n{tail}") from None
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=timeout_s)


def python() -> str:
    return sys.executable


def raise_nofile() -> None:
    """Children inherit the limit: 1000 streams through a proxy need a few thousand sockets."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (nginx's worker, a proxy's helper processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def cpu_times(pid: int, tree: bool = True) -> tuple[float, float]:
    """(user, system) CPU seconds of `pid` and (`tree`) its descendants, all threads included."""
    ticks = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for each in tree_pids(pid) if tree else [pid]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])  # utime
        system += int(fields[12])  # stime: syscalls, and the loopback TCP work they do
    return user / ticks, system / ticks


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User + system CPU time of `pid` and (`tree`) its descendants, all threads included."""
    return sum(cpu_times(pid, tree))


class CpuMarks:
    """`on_window` callback of run_load: CPU seconds of `pid` (and children) in the window."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.marks: dict[str, tuple[float, float]] = {}  # label -> (user, system)
        self.own_marks: dict[str, float] = {}  # `pid` alone (the proxy without its worker)

    def __call__(self, label: str) -> None:
        self.marks[label] = cpu_times(self.pid)
        self.own_marks[label] = cpu_seconds(self.pid, tree=False)

    def _delta(self, index: int) -> float:
        start, end = self.marks.get("start"), self.marks.get("end")
        return end[index] - start[index] if start and end else 0.0

    @property
    def seconds(self) -> float:
        return self.user_seconds + self.system_seconds

    @property
    def user_seconds(self) -> float:
        return self._delta(0)

    @property
    def system_seconds(self) -> float:
        return self._delta(1)

    @property
    def own_seconds(self) -> float:
        return self.own_marks.get("end", 0.0) - self.own_marks.get("start", 0.0)


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _get(port: int, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.read().decode()
    except OSError:
        return None


def scrape_json(port: int, path: str) -> dict[str, float]:
    """A JSON object of numbers from a server ({} when it does not answer one)."""
    text = _get(port, path)
    try:
        document = json.loads(text) if text is not None else {}
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def scrape_counters(port: int, path: str, prefixes: Sequence[str]) -> dict[str, float] | None:
    """Sum of each Prometheus sample whose name+labels start with one of `prefixes`; None
    when the server does not answer (a labelled counter has no sample before its first use)."""
    text = _get(port, path)
    if text is None:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith(tuple(prefixes)):
            out[name] = out.get(name, 0.0) + float(value)
    return out
