"""The four measurements: added latency, relay throughput, shadow impact, memory.

Each scenario starts its own backends and relays, runs the load against every path in
turn (`reps` rounds, interleaved, so drift on a shared machine hits all paths alike) and
returns figures compared with references measured in the same scenario.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from _figures import Figure, percentile
from _load import LoadResult, LoadSpec, run_load
from _paths import BackendKind, Layout, Server, backend, bare_relay, mirroring_proxy, nginx
from _procs import cpu_seconds, dead_port, free_port, memory, open_fds

PathName = Literal["direct", "proxy", "nginx", "bare"]
MB = 1024 * 1024


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
    latency_tokens: int = 16
    latency_itl_ms: float = 50.0
    throughput_concurrency: int = 64
    throughput_tokens: int = 256
    impact_concurrency: int = 64
    impact_ttft_ms: float = 20.0
    impact_itl_ms: float = 5.0
    impact_tokens: int = 16
    slow_factor: float = 10.0
    memory_streams: int = 1000
    memory_itl_ms: float = 500.0
    load_processes: int = 1
    baseline: bool = True
    proxy_args: tuple[str, ...] = ()


@dataclass
class Outcome:
    """What a scenario hands back: figures for the table and raw numbers for the JSON."""

    figures: list[Figure] = field(default_factory=list)
    raw: dict[str, object] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)


def _spec(cfg: BenchConfig, layout: Layout, port: int, concurrency: int, tokens: int,
          request_s: float = 0.0) -> LoadSpec:
    """Streams start spread over one request's duration, so they do not arrive in waves."""
    return LoadSpec(
        port=port, concurrency=concurrency, duration_s=cfg.duration_s,
        warmup_s=max(cfg.warmup_s, request_s + 0.2), max_tokens=tokens,
        processes=cfg.load_processes, cpus=layout.load_cpus, stagger_s=request_s,
    )


def _merge(into: LoadResult, part: LoadResult) -> None:
    into.ttfts_s += part.ttfts_s
    into.e2es_s += part.e2es_s
    into.events += part.events
    into.window_s += part.window_s
    into.completed += part.completed
    into.errors += part.errors
    into.error_samples = (into.error_samples + part.error_samples)[:5]


def _summary(result: LoadResult) -> dict[str, object]:
    ms = [t * 1000 for t in result.ttfts_s]
    return {
        "ttft_p50_ms": percentile(ms, 50), "ttft_p90_ms": percentile(ms, 90),
        "ttft_p99_ms": percentile(ms, 99), "samples": len(ms), "completed": result.completed,
        "events": result.events, "events_per_s": result.events_per_s,
        "errors": result.errors, "error_samples": result.error_samples,
    }


@contextlib.contextmanager
def _servers(cfg: BenchConfig, layout: Layout, tmp: Path, ttft_ms: float, itl_ms: float):  # type: ignore[no-untyped-def]
    """Backends (primary; shadow and baseline when the proxy is measured) and every relay of
    cfg.paths in front of the primary; yields {path: Server}, "direct" being the primary."""
    with contextlib.ExitStack() as stack:
        roles = ["primary"]
        if "proxy" in cfg.paths:
            roles += ["shadow", "baseline"] if cfg.baseline else ["shadow"]
        backends = {
            role: stack.enter_context(
                backend(layout, cfg.backend, role, free_port(), ttft_ms, itl_ms)
            )
            for role in roles
        }
        primary = backends["primary"]
        servers: dict[str, Server] = {"direct": primary}
        if "proxy" in cfg.paths:
            servers["proxy"] = stack.enter_context(mirroring_proxy(
                layout, free_port(), primary.url, backends["shadow"].url,
                backends["baseline"].url if "baseline" in backends else None,
                tmp / f"records-{primary.port}.sqlite", cfg.proxy_args,
            ))
        if "nginx" in cfg.paths:
            servers["nginx"] = stack.enter_context(
                nginx(layout, free_port(), primary.port, tmp / f"nginx-{primary.port}")
            )
        if "bare" in cfg.paths:
            servers["bare"] = stack.enter_context(bare_relay(layout, free_port(), primary.url))
        yield servers


def latency(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    out = Outcome()
    results = {p: LoadResult() for p in cfg.paths}
    with _servers(cfg, layout, tmp, 0.0, cfg.latency_itl_ms) as servers:
        for _ in range(cfg.reps):
            for path in cfg.paths:
                spec = _spec(cfg, layout, servers[path].port, cfg.latency_concurrency,
                             cfg.latency_tokens, cfg.latency_tokens * cfg.latency_itl_ms / 1000)
                _merge(results[path], run_load(spec))
    summaries = {p: _summary(r) for p, r in results.items()}
    out.raw = {"concurrency": cfg.latency_concurrency, "paths": summaries}
    out.errors = {p: r.errors for p, r in results.items()}
    direct = summaries["direct"]
    added = {
        p: {q: float(s[f"ttft_{q}_ms"]) - float(direct[f"ttft_{q}_ms"]) for q in ("p50", "p99")}  # type: ignore[arg-type]
        for p, s in summaries.items()
    }
    out.raw["added_ms"] = added
    conc = cfg.latency_concurrency
    for q in ("p50", "p99"):
        out.figures.append(Figure("latency", f"direct TTFT {q} @{conc}",
                                  float(direct[f"ttft_{q}_ms"]), "ms"))  # type: ignore[arg-type]
    for path in ("nginx", "bare"):
        if path in added:
            for q in ("p50", "p99"):
                out.figures.append(Figure("latency", f"{path} added TTFT {q}", added[path][q], "ms"))
    if "proxy" in added:
        nginx_added = added.get("nginx")
        for q, limit in (("p50", 1.0), ("p99", 3.0)):
            value = added["proxy"][q]
            ok = value <= limit and (q != "p50" or nginx_added is None or value <= nginx_added[q])
            out.figures.append(Figure(
                "latency", f"proxy added TTFT {q} @{conc}", value, "ms",
                reference="nginx added" if nginx_added else "",
                reference_value=nginx_added[q] if nginx_added else None, compare="delta",
                target=f"<= {limit:g} ms" + (" and <= nginx" if q == "p50" else ""),
                passed=ok if not math.isnan(value) else False,
            ))
    return out


def throughput(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    out = Outcome()
    results = {p: LoadResult() for p in cfg.paths}
    cpu_s = {p: 0.0 for p in cfg.paths}
    with _servers(cfg, layout, tmp, 0.0, 0.0) as servers:
        for _ in range(cfg.reps):
            for path in cfg.paths:
                marks: dict[str, float] = {}
                pid = servers[path].pid

                def mark(label: str, pid: int = pid, marks: dict[str, float] = marks) -> None:
                    marks[label] = cpu_seconds(pid)

                spec = _spec(cfg, layout, servers[path].port, cfg.throughput_concurrency,
                             cfg.throughput_tokens)
                _merge(results[path], run_load(spec, on_window=mark))
                cpu_s[path] += marks.get("end", 0.0) - marks.get("start", 0.0)
    out.errors = {p: r.errors for p, r in results.items()}
    capacity = {p: (r.events / cpu_s[p] if cpu_s[p] > 0 else math.nan) for p, r in results.items()}
    busy = {p: cpu_s[p] / r.window_s if r.window_s else math.nan for p, r in results.items()}
    out.raw = {
        "concurrency": cfg.throughput_concurrency, "tokens": cfg.throughput_tokens,
        "paths": {p: {**_summary(r), "server_cpu_s": cpu_s[p], "server_cpu_busy": busy[p],
                      "events_per_cpu_s": capacity[p]} for p, r in results.items()},
    }
    direct_rate = results["direct"].events_per_s
    out.figures.append(Figure("throughput", "direct events/s (load limit)", direct_rate, "ev/s"))
    for path in ("nginx", "bare", "proxy"):
        if path not in results:
            continue
        rate = results[path].events_per_s
        out.figures.append(Figure(
            "throughput", f"{path} events/s (core {busy[path]:.0%} busy)", rate, "ev/s",
            reference="direct", reference_value=direct_rate, compare="ratio",
        ))
        if path != "proxy":
            out.figures.append(Figure("throughput", f"{path} events per CPU-s", capacity[path], "ev/s"))
            continue
        ref = capacity.get("nginx")
        value = capacity[path]
        ok = value >= 40_000 and (ref is None or value >= ref)
        out.figures.append(Figure(
            "throughput", "proxy events per CPU-s (1 core)", value, "ev/s",
            reference="nginx" if ref is not None else "", reference_value=ref, compare="ratio",
            target=">= 40000 and >= nginx", passed=ok if not math.isnan(value) else False,
        ))
    return out


def impact(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    variants = ("normal", "slow", "dead")
    results = {v: LoadResult() for v in variants}
    slow_ttft, slow_itl = cfg.impact_ttft_ms * cfg.slow_factor, cfg.impact_itl_ms * cfg.slow_factor
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(backend(layout, cfg.backend, "primary", free_port(),
                                              cfg.impact_ttft_ms, cfg.impact_itl_ms))
        normal = stack.enter_context(backend(layout, cfg.backend, "shadow", free_port(),
                                             cfg.impact_ttft_ms, cfg.impact_itl_ms))
        slow = stack.enter_context(backend(layout, cfg.backend, "slow-shadow", free_port(),
                                           slow_ttft, slow_itl))
        shadows = {"normal": normal.url, "slow": slow.url,
                   "dead": f"http://127.0.0.1:{dead_port()}"}
        proxies = {
            v: stack.enter_context(mirroring_proxy(
                layout, free_port(), primary.url, shadows[v], None, tmp / f"impact-{v}.sqlite",
                cfg.proxy_args))
            for v in variants
        }
        for _ in range(cfg.reps):
            for v in variants:
                spec = _spec(cfg, layout, proxies[v].port, cfg.impact_concurrency, cfg.impact_tokens,
                             (cfg.impact_ttft_ms + cfg.impact_tokens * cfg.impact_itl_ms) / 1000)
                _merge(results[v], run_load(spec))
    summaries = {v: _summary(r) for v, r in results.items()}
    out.raw = {"concurrency": cfg.impact_concurrency, "shadows": summaries,
               "primary_ttft_ms": cfg.impact_ttft_ms, "slow_factor": cfg.slow_factor}
    out.errors = {f"proxy/{v}-shadow": r.errors for v, r in results.items()}
    ref = float(summaries["normal"]["ttft_p99_ms"])  # type: ignore[arg-type]
    out.figures.append(Figure("impact", "primary TTFT p99, normal shadow", ref, "ms"))
    for v, label in (("slow", f"{cfg.slow_factor:g}x slower"), ("dead", "dead")):
        value = float(summaries[v]["ttft_p99_ms"])  # type: ignore[arg-type]
        ok = value <= ref * 1.05 if not math.isnan(value) else False
        out.figures.append(Figure(
            "impact", f"primary TTFT p99, {label} shadow", value, "ms",
            reference="normal shadow", reference_value=ref, compare="ratio",
            target="<= x1.05", passed=ok,
        ))
    return out


def memory_use(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    streams = cfg.memory_streams
    warm_s = max(cfg.warmup_s, 3.0 if cfg.mode != "smoke" else 0.5)
    tokens = math.ceil((warm_s + cfg.duration_s) * 1000 / cfg.memory_itl_ms) + 5
    peak = {"rss": 0, "fds": 0}
    with _servers(replace(cfg, paths=("direct", "proxy")), layout, tmp, 0.0,
                  cfg.memory_itl_ms) as servers:
        proxy = servers["proxy"]
        idle = memory(proxy.pid)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                with contextlib.suppress(OSError):
                    peak["rss"] = max(peak["rss"], memory(proxy.pid).rss_bytes)
                    peak["fds"] = max(peak["fds"], open_fds(proxy.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        spec = LoadSpec(port=proxy.port, concurrency=streams, duration_s=cfg.duration_s,
                        warmup_s=warm_s, max_tokens=tokens, stagger_s=warm_s / 2,
                        processes=max(2, cfg.load_processes), cpus=layout.load_cpus)
        started = time.perf_counter()
        result = run_load(spec)
        stop.set()
        sampler.join()
        final = memory(proxy.pid)
    expected_rate = streams * 1000 / cfg.memory_itl_ms
    out.errors = {"proxy/memory": result.errors}
    out.raw = {"streams": streams, "idle_rss_mb": idle.rss_bytes / MB,
               "peak_rss_mb": peak["rss"] / MB, "hwm_mb": final.hwm_bytes / MB,
               "peak_fds": peak["fds"], "expected_events_per_s": expected_rate,
               "took_s": time.perf_counter() - started, **_summary(result)}
    out.figures += [
        Figure("memory", f"client events/s @{streams} streams", result.events_per_s, "ev/s",
               reference="expected (all streams open)", reference_value=expected_rate,
               compare="ratio"),
        Figure("memory", "proxy open fds (peak)", float(peak["fds"]), ""),
        Figure("memory", f"proxy VmHWM @{streams} mirrored streams", final.hwm_bytes / MB, "MB",
               reference="idle RSS", reference_value=idle.rss_bytes / MB, compare="ratio",
               target="<= 300 MB", passed=final.hwm_bytes <= 300 * MB),
    ]
    return out


SCENARIOS = {"latency": latency, "throughput": throughput, "impact": impact, "memory": memory_use}
