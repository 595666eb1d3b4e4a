"""The memory scenario: the proxy's peak RSS while `memory_streams` mirrored streams are open.

A high-water mark only grows, so each round starts its own backends and proxy.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import replace
from pathlib import Path

from _common import BenchConfig, Outcome, servers_for, summary
from _figures import figure
from _load import LoadSpec, run_load
from _paths import Layout, mirror_counters
from _procs import memory, open_fds

MB = 1024 * 1024


def _sample(pid: int, peak: dict[str, int], stop: threading.Event) -> None:
    while not stop.wait(0.25):
        with contextlib.suppress(OSError):
            peak["rss"] = max(peak["rss"], memory(pid).rss_bytes)
            peak["fds"] = max(peak["fds"], open_fds(pid))


def memory_use(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Proxy VmHWM (relay and capture worker) with `memory_streams` streams open, per round."""
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    streams = cfg.memory_streams
    # Open the streams gently (50 new mirrored requests a second), then hold them: a proxy
    # that cannot keep up leaves connections in its accept queue ("streaming at window end").
    ramp_s = 20.0 if cfg.mode != "smoke" else 0.3
    warm_s = ramp_s + max(cfg.warmup_s, 3.0 if cfg.mode != "smoke" else 0.2)
    tokens = math.ceil((warm_s + cfg.duration_s) * 1000 / cfg.memory_itl_ms) + 5
    keys = ("hwm_mb", "idle_rss_mb", "peak_rss_mb", "peak_fds", "events_per_s", "streaming")
    rounds: dict[str, list[float]] = {k: [] for k in keys}
    raw_rounds = []
    errors = 0
    for _ in range(cfg.reps):
        peak = {"rss": 0, "fds": 0}
        with servers_for(replace(cfg, paths=("direct", "proxy")), layout, tmp, 0.0,
                         cfg.memory_itl_ms) as servers:
            proxy = servers["proxy"]
            idle = memory(proxy.pid)
            stop = threading.Event()
            sampler = threading.Thread(target=_sample, args=(proxy.pid, peak, stop), daemon=True)
            sampler.start()
            spec = LoadSpec(port=proxy.port, concurrency=streams, duration_s=cfg.duration_s,
                            warmup_s=warm_s, max_tokens=tokens, stagger_s=ramp_s,
                            processes=max(2, cfg.load_processes), cpus=layout.load_cpus)
            result = run_load(spec)
            stop.set()
            sampler.join()
            final = memory(proxy.pid)
            counters = mirror_counters(proxy)
        errors += result.errors
        for key, value in (("hwm_mb", final.hwm_bytes / MB), ("idle_rss_mb", idle.rss_bytes / MB),
                           ("peak_rss_mb", peak["rss"] / MB), ("peak_fds", peak["fds"]),
                           ("events_per_s", result.events_per_s),
                           ("streaming", result.streaming_at_end)):
            rounds[key].append(float(value))
        raw_rounds.append({"proxy_counters": counters, **summary(result)})
    expected_rate = streams * 1000 / cfg.memory_itl_ms
    out.errors = {"proxy": errors}
    out.raw = {"streams": streams, "expected_events_per_s": expected_rate, **rounds,
               "rounds": raw_rounds}
    out.figures += [
        figure("memory", f"client events/s @{streams} streams", rounds["events_per_s"], "ev/s",
               reference="expected, all streams open",
               reference_rounds=[expected_rate] * cfg.reps, compare="ratio"),
        figure("memory", "streams streaming at window end", rounds["streaming"], "",
               reference="streams", reference_rounds=[float(streams)] * cfg.reps,
               compare="ratio"),
        figure("memory", "proxy open fds (peak)", rounds["peak_fds"], ""),
        figure("memory", "proxy VmRSS (peak sampled)", rounds["peak_rss_mb"], "MB"),
        figure("memory", f"proxy VmHWM @{streams} mirrored streams", rounds["hwm_mb"], "MB",
               reference="idle RSS", reference_rounds=rounds["idle_rss_mb"], compare="ratio",
               target="<= 300 MB", op="<=", limit=300.0),
    ]
    return out
