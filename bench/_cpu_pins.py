"""vLLM CPU engines in containers on a small machine: their processes' cores (bench/README.md,
"`tune` on real engines")."""

from __future__ import annotations

import os
import threading
from typing import Any

WORKER_COMM = "VLLM::Worker"  # vLLM's compute worker process, pinned by its own bind setting


class FrontendsFloat:
    """While the CPU run lasts, every process of an engine container but vLLM's compute
    workers may run on any core (on by default for the CPU run; `--keep-pins` turns it off).

    Measured here (2026-12-07, kernel 6.18, cgroup v1): a candidate started with
    `VLLM_CPU_OMP_THREADS_BIND=1` had its launcher's preflight child, then its API server,
    pinned to core 0 (vLLM sets the affinity while it loads), where old's compute worker
    spins at 100 % between steps; the preflight child, runnable, got 0.16 s of CPU in 13
    minutes, so the candidate never started (the run before: `seqs1` "not ready within
    900 s"). Pinned there, a candidate's API server also waits behind old's worker, which
    would bias the race against every candidate. The workers (`VLLM::Worker`, pinned per
    thread by `VLLM_CPU_OMP_THREADS_BIND`) are left where they are. Give it a docker client
    of its own: it runs in a thread beside the bench's calls.
    """

    def __init__(self, client: Any, prefixes: tuple[str, ...], every_s: float = 2.0) -> None:
        self.client = client
        self.prefixes = prefixes
        self.every_s = every_s
        self.cpus = os.sched_getaffinity(0)
        self.moved: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frontends-float", daemon=True)

    def __enter__(self) -> FrontendsFloat:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        print(f"frontends-float: {len(self.moved)} pinned processes freed", flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a helper of the bench, never fatal
                print(f"frontends-float: {exc}", flush=True)

    def tick(self) -> None:
        for container in self.client.containers.list():
            if not container.name.startswith(self.prefixes):
                continue
            try:
                rows = container.top(ps_args="-eo pid,comm")["Processes"] or []
            except Exception:  # noqa: BLE001 - it may have just ended
                rows = []
            for pid_text, comm in rows:
                if comm.startswith(WORKER_COMM):
                    continue
                pid = int(pid_text)
                try:
                    if os.sched_getaffinity(pid) == self.cpus:
                        continue
                    for task in os.listdir(f"/proc/{pid}/task"):
                        os.sched_setaffinity(int(task), self.cpus)
                except OSError:
                    continue
                self.moved.append(f"{container.name}:{pid}")
                print(f"frontends-float: {container.name} pid {pid} may run on any core "
                      "again", flush=True)
