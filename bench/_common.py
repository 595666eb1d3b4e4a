"""What every scenario shares: the run's configuration, its outcome, load specs, servers.

Each scenario starts its own backends and relays, runs the load against every path in
turn (`reps` rounds, interleaved, so drift on a shared machine hits all paths alike) and
returns figures compared with references measured in the same scenario.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from _figures import Figure, percentile
from _load import LoadResult, LoadSpec
from _paths import BackendKind, Layout, Server, backend, bare_relay, mirroring_proxy, nginx
from _procs import free_port
from nginx import NginxKind

PathName = Literal["direct", "proxy", "nginx-plain", "nginx-mirror", "nginx",
                   "nginx-mirror-headers", "bare", "unsampled"]
# The order each round runs them in: the two mirroring peers apart, so what one leaves
# in flight at its window's end does not land in the other's window.
ALL_PATHS: tuple[PathName, ...] = ("direct", "proxy", "nginx-plain", "nginx-mirror", "nginx",
                                   "nginx-mirror-headers", "bare", "unsampled")
MIRRORING_PATHS = ("proxy", "nginx-mirror", "nginx-mirror-headers")


@dataclass(frozen=True)
class BenchConfig:
    """Sizes and knobs of one run (built by proxy_bench.py's command line)."""

    mode: Literal["full", "quick", "smoke"]
    paths: tuple[PathName, ...]
    scenarios: tuple[str, ...]
    backend: BackendKind
    duration_s: float
    warmup_s: float
    reps: int
    latency_concurrency: int = 256
    latency_tokens: int = 64
    latency_itl_ms: float = 50.0
    throughput_concurrency: int = 64
    throughput_tokens: int = 256
    paced_concurrency: int = 128
    paced_itl_ms: float = 2.0
    impact_concurrency: int = 16
    impact_ttft_ms: float = 20.0
    impact_itl_ms: float = 5.0
    impact_tokens: int = 64
    slow_factor: float = 10.0
    memory_streams: int = 1000
    memory_itl_ms: float = 500.0
    vllm_streams: int = 64
    vllm_tokens: int = 200
    load_processes: int = 1
    baseline: bool = True
    proxy_args: tuple[str, ...] = ()


@dataclass
class Outcome:
    """What a scenario hands back: figures for the table and raw numbers for the JSON."""

    figures: list[Figure] = field(default_factory=list)
    raw: dict[str, object] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)


def load_spec(cfg: BenchConfig, layout: Layout, port: int, concurrency: int, tokens: int,
              request_s: float = 0.0) -> LoadSpec:
    """Streams start spread over one request's duration, so they do not arrive in waves."""
    return LoadSpec(
        port=port, concurrency=concurrency, duration_s=cfg.duration_s,
        warmup_s=max(cfg.warmup_s, request_s + 0.2), max_tokens=tokens,
        processes=cfg.load_processes, cpus=layout.load_cpus, stagger_s=request_s,
    )


def merge(into: LoadResult, part: LoadResult) -> None:
    into.ttfts_s += part.ttfts_s
    into.e2es_s += part.e2es_s
    into.events += part.events
    into.window_s += part.window_s
    into.completed += part.completed
    into.errors += part.errors
    into.error_samples = (into.error_samples + part.error_samples)[:5]


def summary(result: LoadResult) -> dict[str, object]:
    ms = [t * 1000 for t in result.ttfts_s]
    return {
        "ttft_p50_ms": percentile(ms, 50), "ttft_p90_ms": percentile(ms, 90),
        "ttft_p99_ms": percentile(ms, 99), "samples": len(ms), "completed": result.completed,
        "events": result.events, "events_per_s": result.events_per_s,
        "errors": result.errors, "error_samples": result.error_samples,
    }


@contextlib.contextmanager
def servers_for(cfg: BenchConfig, layout: Layout, tmp: Path, ttft_ms: float, itl_ms: float):
    """Backends (primary; shadow and baseline when the proxy is measured) and every relay of
    cfg.paths in front of the primary; yields {path: Server}, "direct" being the primary."""
    with contextlib.ExitStack() as stack:
        roles = ["primary"]
        if set(MIRRORING_PATHS) & set(cfg.paths):
            roles += ["shadow", "baseline"] if cfg.baseline else ["shadow"]
        elif "unsampled" in cfg.paths:
            roles += ["shadow"]
        backends = {
            role: stack.enter_context(
                backend(layout, cfg.backend, role, free_port(), ttft_ms, itl_ms,
                        mirror_target=role != "primary")
            )
            for role in roles
        }
        primary = backends["primary"]
        # "shadow": not a path; what the mirror shares count (bench/_evidence.py).
        servers: dict[str, Server] = {"direct": primary, **{
            role: b for role, b in backends.items() if role == "shadow"}}
        servers.update(relays(stack, cfg.paths, cfg.proxy_args, layout, tmp, primary,
                              backends.get("shadow"), backends.get("baseline")))
        yield servers


def relays(stack: contextlib.ExitStack, paths: Sequence[str], proxy_args: tuple[str, ...],
           layout: Layout, tmp: Path, primary: Server, shadow: Server | None,
           baseline: Server | None) -> dict[str, Server]:
    """Every relay of `paths` in front of `primary`, mirroring to `shadow` (and `baseline`)
    where it mirrors, started on `stack`; {path: Server}."""
    servers: dict[str, Server] = {}
    shadow_url = shadow.url if shadow is not None else None
    if "proxy" in paths:
        servers["proxy"] = stack.enter_context(mirroring_proxy(
            layout, free_port(), primary.url, shadow_url,
            baseline.url if baseline is not None else None,
            tmp / f"records-{primary.port}.sqlite", proxy_args,
        ))
    mirror_ports = [b.port for b in (shadow, baseline) if b is not None]
    kinds: dict[str, NginxKind] = {"nginx": "streaming", "nginx-plain": "plain",
                                   "nginx-mirror": "mirror",
                                   "nginx-mirror-headers": "mirror-headers"}
    for path, kind in kinds.items():
        if path in paths:
            servers[path] = stack.enter_context(nginx(
                layout, path, free_port(), primary.port, tmp / f"{path}-{primary.port}",
                kind, mirror_ports))
    if "bare" in paths:
        servers["bare"] = stack.enter_context(bare_relay(layout, free_port(), primary.url))
    if "unsampled" in paths:  # the proxy's relay alone: --sample-rate 0
        servers["unsampled"] = stack.enter_context(mirroring_proxy(
            layout, free_port(), primary.url, shadow_url, None,
            tmp / f"unsampled-{primary.port}.sqlite", proxy_args, sample_rate=0.0,
        ))
    return servers


def ttft_ms(result: LoadResult, q: float) -> float:
    return percentile([t * 1000 for t in result.ttfts_s], q)
