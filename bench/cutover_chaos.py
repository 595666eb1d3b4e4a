"""Chaos run of repeated cutovers under streaming load (issue 24).

Two simulated engines on loopback (`vllm-cutover sim`, versions A and B), a real proxy
process in front, 4 clients streaming through it all along, and cutovers in adopt mode one
after another, each from the engine that serves to the other. At a random moment of each
cutover one fault is injected:
- `proxy_kill`: the proxy SIGKILLed and started again on the same state file;
- `disk_full`: the state file's file system (a 512 KiB tmpfs of its own) filled for 3 s;
- `new_killed`: the new engine SIGKILLed (and started again after the cutover ended);
- `none`.
Every cutover must end (by its deadlines), and in a state that matches the routes it
reports: `done` -> the new engine is primary and nothing is mirrored; `aborted`,
`rolled_back` -> the old one is primary alone; `failed` -> counted and shown.

Prints the counts as JSON: cutovers, their ends, faults, client requests and failures,
split into those while the primary was down (the proxy killed until it serves again; the
new engine killed while it was primary, until the rollback moved clients) and the others.
The clients retry at once, so a second of downtime is many failed requests.
Needs root (mount); run under the heavy lock:
    flock /tmp/heavy.lock env PYTHONPATH=$PWD python bench/cutover_chaos.py --cutovers 12
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from proxy.cutover.shell.client import CutoverClient
from tests.e2e.cutover_harness import TERMINAL, CutoverProxy, LoadThread, wait_count
from tests.e2e.proxy_fixtures import ADMIN_TOKEN
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

MODEL = "tiny-sim"
FAULTS = ("proxy_kill", "disk_full", "new_killed", "none")
SPEC = {"min_samples": 20, "analysis_delay_s": 1.0, "analysis_timeout_s": 40.0,
        "warmup_timeout_s": 20.0, "post_promotion_s": 2.0, "scale_down_delay_s": 0.5}


class Engine:
    """One simulated engine as a process on a fixed loopback port."""

    def __init__(self, work: Path, version: str) -> None:
        self.work, self.version, self.port = work, version, free_port()
        self.process: ServerProcess | None = None
        self.url = f"http://{HOST}:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "proxy", "--log-level", "WARNING", "sim", "--host", HOST,
                "--port", str(self.port), "--model-name", MODEL, "--version", self.version,
                "--ttft-ms", "20", "--itl-ms", "8"]
        self.process = spawn(argv, port=self.port, log_path=self.work / f"sim-{self.version}.log")
        self.process.wait_ready(30)

    def kill(self) -> None:
        if self.process is not None:
            self.process.proc.kill()
            self.process.proc.wait(10)
            self.process = None

    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None


@contextlib.contextmanager
def small_tmpfs(size: str = "512k") -> Iterator[Path]:
    """A file system of its own for the state file, to fill for real."""
    path = Path(tempfile.mkdtemp(prefix="chaos-state-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


def fill(directory: Path) -> Path:
    """Fill the file system of `directory` with one file (ENOSPC ends the writing)."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return filler


def wait_end(client: CutoverClient, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            status = client.status()
            if status.get("phase") in TERMINAL and status.get("terminal"):
                return status
        if time.monotonic() > deadline:
            raise TimeoutError("the cutover did not end in time")
        time.sleep(0.3)


def consistent(status: dict[str, Any], routes: dict[str, Any], old: str, new: str) -> bool:
    phase = status["phase"]
    if phase == "done":
        return routes["primary"] == new and routes["shadow"] is None
    if phase in ("aborted", "rolled_back"):
        return routes["primary"] == old and routes["shadow"] is None
    return routes["primary"] in (old, new)  # failed: it says which serves


def run(cutovers: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    engines = [Engine(work, "0.31.0-sim"), Engine(work, "0.32.0-sim")]
    for engine in engines:
        engine.start()
    ends: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    windows: list[tuple[float, float]] = []  # (from, to) perf_counter: the primary was down
    mismatches: list[str] = []
    with small_tmpfs() as state_dir:
        proxy = CutoverProxy(work, engines[0].url, extra_args=[
            "--state-file", str(state_dir / "state.json"), "--gate-max-ttft-p50-ratio", "0",
            "--gate-max-tpot-p50-ratio", "0"])
        proxy.start()
        client = CutoverClient(proxy.admin_url, ADMIN_TOKEN)
        serving = 0
        load = LoadThread(proxy.url, MODEL, clients=4)
        with load:
            wait_count(load, 20, 60)
            for _ in range(cutovers):
                old, new = engines[serving], engines[1 - serving]
                if not new.alive():
                    new.start()
                fault = rng.choice(FAULTS)
                client.start({"new_url": new.url, **SPEC})
                time.sleep(rng.uniform(0.0, 8.0))
                if fault != "none" and client.status().get("terminal"):
                    fault = "none"  # the cutover ended first: nothing of it to disturb
                faults[fault] += 1
                began = time.perf_counter()
                if fault == "proxy_kill":
                    proxy.kill()
                    proxy.start()
                    windows.append((began, time.perf_counter() + 1.0))
                elif fault == "disk_full":
                    filler = fill(state_dir)
                    time.sleep(3.0)
                    filler.unlink(missing_ok=True)
                elif fault == "new_killed":
                    new.kill()
                status = wait_end(client, 180)
                if fault == "new_killed" and status.get("promoted_unix"):
                    # new was serving: its clients fail until the rollback moved them
                    windows.append((began, time.perf_counter()))
                routes = proxy.routes()
                ends[status["phase"]] += 1
                if not consistent(status, routes, old.url, new.url):
                    mismatches.append(f"{status['phase']}: routes {routes}")
                if status["phase"] == "done":
                    serving = 1 - serving
                if not new.alive():
                    new.start()
            result = load.stop()
        proxy.stop()
    for engine in engines:
        engine.kill()
    inside = [o for o in result.failures
              if any(start - 1.0 <= o.started_s <= end for start, end in windows)]
    outside = [o for o in result.failures if o not in inside]
    return {"cutovers": cutovers, "ends": dict(ends), "faults": dict(faults),
            "client_requests": len(result.outcomes), "client_failures": len(result.failures),
            "primary_down_s": round(sum(end - start for start, end in windows), 1),
            "client_failures_while_the_primary_was_down": len(inside),
            "client_failures_otherwise": len(outside),
            "failure_kinds_otherwise": dict(Counter(o.error for o in outside)),
            "state_route_mismatches": mismatches, "seed": seed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cutovers", type=int, default=12)
    parser.add_argument("--seed", type=int, default=24)
    args = parser.parse_args()
    figures = run(args.cutovers, args.seed)
    print(json.dumps(figures, indent=1, sort_keys=True))
    return 0 if not figures["state_route_mismatches"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
