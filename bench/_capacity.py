"""Capacity scenarios: SSE events relayed per second on one core, and memory at many streams.

Events per CPU-second of the relay process (events the client received in the window
divided by the relay's user+system CPU time in the same window, /proc/PID/stat) is the
relay's capacity on one core whether or not the load generator could saturate it; the
wall-clock events/s and the relay core's busy share are shown beside it.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import replace
from pathlib import Path

from _common import BenchConfig, Outcome, load_spec, merge, servers_for, summary
from _figures import Figure
from _load import LoadResult, LoadSpec, run_load
from _paths import Layout, mirror_counters
from _procs import CpuMarks, memory, open_fds

MB = 1024 * 1024


def _relay_rate(
    cfg: BenchConfig, layout: Layout, tmp: Path, scenario: str, concurrency: int, tokens: int,
    itl_ms: float,
) -> Outcome:
    out = Outcome()
    results = {p: LoadResult() for p in cfg.paths}
    cpu_s = {p: 0.0 for p in cfg.paths}
    system_s = {p: 0.0 for p in cfg.paths}
    own_cpu_s = {p: 0.0 for p in cfg.paths}
    with servers_for(cfg, layout, tmp, 0.0, itl_ms) as servers:
        for _ in range(cfg.reps):
            for path in cfg.paths:
                marks = CpuMarks(servers[path].pid)
                spec = load_spec(cfg, layout, servers[path].port, concurrency, tokens,
                                 tokens * itl_ms / 1000)
                merge(results[path], run_load(spec, on_window=marks))
                cpu_s[path] += marks.seconds
                system_s[path] += marks.system_seconds
                own_cpu_s[path] += marks.own_seconds
        counters = mirror_counters(servers["proxy"]) if "proxy" in servers else {}
    out.errors = {p: r.errors for p, r in results.items()}
    capacity = {p: (r.events / cpu_s[p] if cpu_s[p] > 0 else math.nan) for p, r in results.items()}
    busy = {p: cpu_s[p] / r.window_s if r.window_s else math.nan for p, r in results.items()}
    # Kernel time is the read and the write per event (and the loopback TCP work they do):
    # the same syscalls for every relay, so what is left, user time, is where relays differ.
    us_per_event = {p: {"user": (cpu_s[p] - system_s[p]) * 1e6 / r.events,
                        "kernel": system_s[p] * 1e6 / r.events}
                    for p, r in results.items() if r.events and p != "direct"}
    out.raw = {
        "concurrency": concurrency, "tokens": tokens, "itl_ms": itl_ms, "proxy_counters": counters,
        "paths": {p: {**summary(r), "server_cpu_s": cpu_s[p], "server_cpu_busy": busy[p],
                      "server_system_cpu_s": system_s[p], "events_per_cpu_s": capacity[p],
                      "cpu_us_per_event": us_per_event.get(p)} for p, r in results.items()},
    }
    direct_rate = results["direct"].events_per_s
    out.figures.append(Figure(scenario, "direct events/s (load limit)", direct_rate, "ev/s"))
    for path in ("nginx-plain", "nginx", "bare", "unsampled", "proxy"):
        if path not in results:
            continue
        out.figures.append(Figure(
            scenario, f"{path} events/s (its core {busy[path]:.0%} busy)",
            results[path].events_per_s, "ev/s",
            reference="direct", reference_value=direct_rate, compare="ratio",
        ))
        if path in us_per_event:
            reference = us_per_event.get("nginx") if path != "nginx" else None
            for part in ("kernel", "user"):
                out.figures.append(Figure(
                    scenario, f"{path} {part} CPU per event", us_per_event[path][part], "us",
                    reference="nginx" if reference else "",
                    reference_value=reference[part] if reference else None, compare="ratio"))
        if path != "proxy":
            out.figures.append(Figure(scenario, f"{path} events per CPU-s", capacity[path], "ev/s"))
            continue
        ref = capacity.get("nginx")
        if 0 < own_cpu_s[path] < cpu_s[path]:
            # With a capture worker: the relay's own core, were the worker on another one.
            own = results[path].events / own_cpu_s[path]
            out.raw["proxy_relay_process_events_per_cpu_s"] = own
            out.figures.append(Figure(
                scenario, "proxy relay process alone, events per CPU-s", own, "ev/s",
                reference="nginx" if ref is not None else "", reference_value=ref,
                compare="ratio"))
        value = capacity[path]
        out.figures.append(Figure(
            scenario, "proxy events per CPU-s (1 core)", value, "ev/s",
            target=">= 40000", passed=value >= 40_000 if not math.isnan(value) else False,
        ))
        for name in ("nginx-plain", "nginx"):  # the reference, then the stricter one
            if name in capacity:
                out.figures.append(Figure(
                    scenario, f"proxy events per CPU-s vs {name}", value, "ev/s",
                    reference=name, reference_value=capacity[name], compare="ratio",
                    target=f">= {name}", passed=value >= capacity[name]
                    if not math.isnan(value) else False,
                ))
    return out


def throughput(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Backends with no delays: each answer's events come in bursts as fast as they are made."""
    return _relay_rate(cfg, layout, tmp, "throughput", cfg.throughput_concurrency,
                       cfg.throughput_tokens, 0.0)


def paced(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Many streams, one event every `paced_itl_ms` each: events arrive one by one, as vLLM's."""
    tokens = max(8, int(500 / cfg.paced_itl_ms))
    return _relay_rate(cfg, layout, tmp, "paced", cfg.paced_concurrency, tokens, cfg.paced_itl_ms)


def memory_use(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Proxy RSS while `memory_streams` mirrored streams are open at once."""
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    streams = cfg.memory_streams
    # Open the streams gently (50 new mirrored requests a second), then hold them: a proxy
    # that cannot keep up leaves connections in its accept queue ("streaming at window end").
    ramp_s = 20.0 if cfg.mode != "smoke" else 0.3
    warm_s = ramp_s + max(cfg.warmup_s, 3.0 if cfg.mode != "smoke" else 0.2)
    tokens = math.ceil((warm_s + cfg.duration_s) * 1000 / cfg.memory_itl_ms) + 5
    peak = {"rss": 0, "fds": 0}
    with servers_for(replace(cfg, paths=("direct", "proxy")), layout, tmp, 0.0,
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
                        warmup_s=warm_s, max_tokens=tokens, stagger_s=ramp_s,
                        processes=max(2, cfg.load_processes), cpus=layout.load_cpus)
        started = time.perf_counter()
        result = run_load(spec)
        stop.set()
        sampler.join()
        final = memory(proxy.pid)
        counters = mirror_counters(proxy)
    expected_rate = streams * 1000 / cfg.memory_itl_ms
    out.errors = {"proxy": result.errors}
    out.raw = {"streams": streams, "idle_rss_mb": idle.rss_bytes / MB,
               "peak_rss_mb": peak["rss"] / MB, "hwm_mb": final.hwm_bytes / MB,
               "peak_fds": peak["fds"], "expected_events_per_s": expected_rate,
               "proxy_counters": counters,
               "took_s": time.perf_counter() - started, **summary(result)}
    out.figures += [
        Figure("memory", f"client events/s @{streams} streams", result.events_per_s, "ev/s",
               reference="expected, all streams open", reference_value=expected_rate,
               compare="ratio"),
        Figure("memory", "streams streaming at window end", float(result.streaming_at_end), "",
               reference="streams", reference_value=float(streams), compare="ratio"),
        Figure("memory", "proxy open fds (peak)", float(peak["fds"]), ""),
        Figure("memory", "proxy VmRSS (peak sampled)", peak["rss"] / MB, "MB"),
        Figure("memory", f"proxy VmHWM @{streams} mirrored streams", final.hwm_bytes / MB, "MB",
               reference="idle RSS", reference_value=idle.rss_bytes / MB, compare="ratio",
               target="<= 300 MB", passed=final.hwm_bytes <= 300 * MB),
    ]
    return out
