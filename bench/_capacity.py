"""Capacity scenarios: SSE events relayed per CPU-second of each relay, round by round.

Events per CPU-second (events the client received in the window divided by the relay's
user+system CPU time in the same window, /proc/PID/stat, its children included: the
proxy's capture worker, nginx's worker) is the relay's capacity on one core whether or
not the load generator could saturate it; the wall-clock events/s and the relay core's
busy share are shown beside it. For the mirroring relays the events counted are the
client's only, so the proxy and nginx's mirror are credited for the same work: one
client stream relayed and two mirrored answers read (and captured, or thrown away).
"""

from __future__ import annotations

import math
from pathlib import Path

from _common import MIRRORING_PATHS, BenchConfig, Outcome, load_spec, servers_for, summary
from _evidence import MirrorShares, counted_run
from _figures import Figure, figure, median
from _latency import PEER, cpu_reference
from _load import LoadResult
from _paths import Layout
from _procs import CpuMarks

INFORMATIVE = ("nginx-plain", "nginx", "nginx-mirror", "nginx-mirror-headers", "bare",
               "unsampled", "proxy")


def _relay_rate(
    cfg: BenchConfig, layout: Layout, tmp: Path, scenario: str, concurrency: int, tokens: int,
    itl_ms: float,
) -> Outcome:
    out = Outcome()
    results = {p: LoadResult() for p in cfg.paths}
    rate: dict[str, list[float]] = {p: [] for p in cfg.paths}  # events/s, wall clock
    busy: dict[str, list[float]] = {p: [] for p in cfg.paths}
    capacity: dict[str, list[float]] = {p: [] for p in cfg.paths}  # events per CPU-s
    own_capacity: list[float] = []  # the proxy's relay process alone
    us_per_event: dict[str, dict[str, list[float]]] = {
        p: {"user": [], "kernel": []} for p in cfg.paths}
    with servers_for(cfg, layout, tmp, 0.0, itl_ms) as servers:
        shares = MirrorShares(servers.get("shadow"), servers.get("proxy"),
                              tuple(p for p in cfg.paths if p in MIRRORING_PATHS))
        for _ in range(cfg.reps):
            for path in cfg.paths:
                marks = CpuMarks(servers[path].pid)
                spec = load_spec(cfg, layout, servers[path].port, concurrency, tokens,
                                 tokens * itl_ms / 1000)
                result = counted_run(shares, path, spec, results[path], marks)
                events = result.events or math.nan
                rate[path].append(result.events_per_s)
                busy[path].append(marks.seconds / spec.duration_s)
                capacity[path].append(events / marks.seconds if marks.seconds else math.nan)
                # Kernel time is the read and the write per event (and the loopback TCP work
                # they do): the same syscalls for every relay; user time is where they differ.
                us_per_event[path]["user"].append(marks.user_seconds * 1e6 / events)
                us_per_event[path]["kernel"].append(marks.system_seconds * 1e6 / events)
                if path == "proxy":
                    own = marks.own_seconds
                    own_capacity.append(events / own if own else math.nan)
        shares.finish()
    out.errors = {p: r.errors for p, r in results.items()}
    out.raw = {
        "concurrency": concurrency, "tokens": tokens, "itl_ms": itl_ms,
        "mirror_shares": shares.shares(),
        "proxy_relay_process_events_per_cpu_s_rounds": own_capacity,
        "paths": {p: {**summary(r), "events_per_s_rounds": rate[p],
                      "server_cpu_busy_rounds": busy[p], "events_per_cpu_s_rounds": capacity[p],
                      "cpu_us_per_event_rounds": us_per_event[p]}
                  for p, r in results.items()},
    }
    out.figures.append(figure(scenario, "direct events/s (load limit)", rate["direct"], "ev/s"))
    for name in INFORMATIVE:
        if name in results:
            out.figures += _path_figures(scenario, name, rate, busy, capacity, us_per_event)
    out.figures += shares.figures(scenario)
    if "proxy" in results:
        out.figures += _targets(scenario, capacity, own_capacity)
    return out


def _path_figures(scenario: str, path: str, rate: dict[str, list[float]],
                  busy: dict[str, list[float]], capacity: dict[str, list[float]],
                  us_per_event: dict[str, dict[str, list[float]]]) -> list[Figure]:
    out = [figure(scenario, f"{path} events/s (its core {median(busy[path]):.0%} busy)",
                  rate[path], "ev/s", reference="direct", reference_rounds=rate["direct"],
                  compare="ratio")]
    ref = cpu_reference(path)
    ref = ref if ref in us_per_event else ""
    for part in ("kernel", "user"):
        out.append(figure(scenario, f"{path} {part} CPU per event", us_per_event[path][part],
                          "us", reference=ref,
                          reference_rounds=us_per_event[ref][part] if ref else (),
                          compare="ratio" if ref else ""))
    out.append(figure(scenario, f"{path} events per CPU-s", capacity[path], "ev/s"))
    return out


def _targets(scenario: str, capacity: dict[str, list[float]],
             own_capacity: list[float]) -> list[Figure]:
    """The whole proxy >= the peer doing its work; its relay process alone >= tuned nginx."""
    out = []
    if PEER in capacity:
        out.append(figure(scenario, f"proxy events per CPU-s vs {PEER}", capacity["proxy"],
                          "ev/s", reference=PEER, reference_rounds=capacity[PEER],
                          compare="ratio", target=f">= {PEER}", op=">=", limit=1.0,
                          judge_relation=True))
    if "nginx" in capacity and own_capacity:
        # With a capture worker: the relay's own core, were the worker on another one.
        out.append(figure(scenario, "proxy relay process alone, events per CPU-s vs nginx",
                          own_capacity, "ev/s", reference="nginx",
                          reference_rounds=capacity["nginx"], compare="ratio",
                          target=">= nginx", op=">=", limit=1.0, judge_relation=True))
    return out


def throughput(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Backends with no delays: each answer's events come in bursts as fast as they are made."""
    return _relay_rate(cfg, layout, tmp, "throughput", cfg.throughput_concurrency,
                       cfg.throughput_tokens, 0.0)


def paced(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Many streams, one event every `paced_itl_ms` each: events arrive one by one, as vLLM's."""
    tokens = max(8, int(500 / cfg.paced_itl_ms))
    return _relay_rate(cfg, layout, tmp, "paced", cfg.paced_concurrency, tokens, cfg.paced_itl_ms)
