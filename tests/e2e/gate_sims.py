"""Simulated engines and a proxy as real processes on loopback sockets, for the gate's
end-to-end tests (A/A runs and repeated cutovers)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.demo.processes import (
    Child,
    free_port,
    sim_ready,
    spawn_sim,
    start_proxy,
    wait_http,
)
from tests.e2e.proxy_fixtures import ADMIN_TOKEN

MODEL = "sim-model"
UNPACED = ("--ttft-ms", "0", "--itl-ms", "0")
PACED = ("--ttft-ms", "40", "--itl-ms", "10", "--jitter", "0.2")  # engine-like pacing


@contextmanager
def sims(work: Path, knobs: dict[str, Sequence[str]]) -> Iterator[dict[str, Child]]:
    """One simulator per name, all with the same tokens (same seed), started together."""
    work.mkdir(parents=True, exist_ok=True)
    logs = {name: work / f"sim-{name}.log" for name in knobs}
    spawned = {name: spawn_sim(["--model-name", MODEL, "--natural-tokens", "12:60",
                                "--seed", "1", *args], logs[name])
               for name, args in knobs.items()}
    children: list[Child] = []
    try:
        for name, process in spawned.items():
            children.append(sim_ready(name, process, logs[name]))
        yield {child.name: child for child in children}
    finally:
        for child in children:
            child.stop()
        for process in spawned.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@contextmanager
def proxy(work: Path, primary: str, extra: Sequence[str] = ()) -> Iterator[Child]:
    """`vllm-cutover proxy` at the default gate settings (plus `extra`)."""
    work.mkdir(parents=True, exist_ok=True)
    argv = ["--primary", primary, "--db", str(work / "records.db"), "--admin-token",
            ADMIN_TOKEN, *extra]
    child = start_proxy(argv, free_port(), free_port(), work / "proxy.log")
    try:
        asyncio.run(wait_http(child, f"{child.admin_url}/admin/routes"))
        yield child
    finally:
        child.stop(timeout_s=30)


def admin_get(child: Child, path: str) -> Any:
    request = urllib.request.Request(f"{child.admin_url}{path}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:  # the gate answers 409 unless it passes
        return json.loads(exc.read())
