"""The servers of a run: simulated backends, the proxy under test, nginx and the bare relay.

Each is a context manager that starts the process pinned to its CPUs, waits for its port
and yields a `Server` (port and PID); leaving the block stops it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from _procs import at_idle_priority, pinned, python, scrape_counters, scrape_json, started
from nginx import NginxKind, nginx_argv

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

BackendKind = Literal["sim", "inline"]
PROXY_METRICS_PATH = "/_vllm_cutover/metrics"
MIRROR_COUNTERS = ("vllm_cutover_shadow_mirrored_total", "vllm_cutover_shadow_dropped_total",
                   "vllm_cutover_token_id_source_total", "vllm_cutover_comparisons_total")


@dataclass(frozen=True)
class Server:
    """A started server: where it listens and which process to measure."""

    name: str
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class Layout:
    """Which CPUs the relay under test gets and which the backends and the load get."""

    relay_cpus: tuple[int, ...]
    load_cpus: tuple[int, ...]
    log_dir: Path


def backend_argv(kind: BackendKind, port: int, ttft_ms: float, itl_ms: float) -> list[str]:
    if kind == "inline":
        return [
            python(), str(BENCH_DIR / "_backend.py"), "--port", str(port),
            "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
        ]
    return [
        python(), "-m", "proxy", "--log-level", "WARNING", "sim", "--port", str(port),
        "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
    ]


@contextlib.contextmanager
def backend(
    layout: Layout, kind: BackendKind, name: str, port: int, ttft_ms: float, itl_ms: float,
    mirror_target: bool = False,
) -> Iterator[Server]:
    """A simulated backend on the load CPUs. A `mirror_target` (shadow, baseline) stands for
    another machine: it runs at idle priority, so on a small machine it only takes CPU time
    the primary backend and the load generator leave, and the primary's own answers are not
    slowed by work that a real deployment does elsewhere. The proxy's side of mirroring
    (capture worker, relay) is measured in full either way."""
    argv = backend_argv(kind, port, ttft_ms, itl_ms)
    if mirror_target:
        argv = at_idle_priority(argv)
    argv = pinned(argv, layout.load_cpus)
    with _started(argv, port, name, layout) as proc:
        yield Server(name, port, proc.pid)


@contextlib.contextmanager
def mirroring_proxy(
    layout: Layout,
    port: int,
    primary: str,
    shadow: str | None,
    baseline: str | None,
    db_path: Path,
    extra_args: Sequence[str] = (),
    sample_rate: float = 1.0,
) -> Iterator[Server]:
    """`vllm-cutover proxy` with mirroring and capture on (sample rate 1.0, records in SQLite)."""
    argv = [
        python(), "-m", "proxy", "--log-level", "WARNING", "proxy",
        "--host", "127.0.0.1", "--port", str(port), "--primary", primary,
        "--sample-rate", str(sample_rate), "--db", str(db_path),
        # No shedding: every sampled request is really mirrored and captured (the worst
        # case for the client path; the in-flight cap is set by the caller).
        "--overload-lag-ms", "0", "--max-worker-delay-ms", "3600000",
    ]
    if shadow:
        argv += ["--shadow", shadow]
    if baseline:
        argv += ["--baseline", baseline]
    # Every sampled request mirrored (no drop at the default cap of 256 in flight): the
    # worst case for the client path. --proxy-arg may override it (argparse keeps the last).
    # The capture worker (mirroring, capture, comparison, records) inherits the relay's
    # CPU, at idle priority: the whole proxy on one core, as nginx is. Its CPU time counts
    # as the proxy's. `--proxy-arg=--worker-cpus=1` moves it elsewhere.
    argv += ["--max-shadow-inflight", "4096", *extra_args]
    with _started(pinned(argv, layout.relay_cpus), port, "proxy", layout, timeout_s=60) as proc:
        yield Server("proxy", port, proc.pid)


def mirror_counters(proxy: Server) -> dict[str, float] | None:
    """The proxy's mirrored / dropped counters, from its own metrics path on the client port."""
    return scrape_counters(proxy.port, PROXY_METRICS_PATH, MIRROR_COUNTERS)


def backend_answers(server: Server) -> float:
    """Generation answers the inline backend wrote to their end (NaN: not the inline one)."""
    return scrape_json(server.port, "/_bench/answers").get("answers", math.nan)


@contextlib.contextmanager
def nginx(layout: Layout, name: str, port: int, upstream_port: int, prefix: Path,
          kind: NginxKind = "streaming", mirror_ports: Sequence[int] = ()) -> Iterator[Server]:
    """nginx of `kind`; its PID is the master's (CPU and memory add its worker to it)."""
    argv = nginx_argv(prefix, port, upstream_port, layout.relay_cpus, kind, mirror_ports)
    with _started(argv, port, name, layout) as proc:
        yield Server(name, port, proc.pid)


@contextlib.contextmanager
def bare_relay(layout: Layout, port: int, upstream: str) -> Iterator[Server]:
    argv = [python(), str(BENCH_DIR / "_relay.py"), "--port", str(port), "--upstream", upstream]
    with _started(pinned(argv, layout.relay_cpus), port, "bare", layout) as proc:
        yield Server("bare", port, proc.pid)


@contextlib.contextmanager
def _started(argv: list[str], port: int, name: str, layout: Layout, timeout_s: float = 30.0):
    with started(argv, port, f"{name}-{port}", layout.log_dir, timeout_s, cwd=REPO_ROOT) as proc:
        yield proc
