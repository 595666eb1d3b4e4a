"""The latency scenario: TTFT each relay adds over the direct path, round by round.

Every figure is the median over the interleaved rounds of a per-round number (a
percentile, a percentile's difference to the direct path in the same round, a CPU time),
printed with its spread; targets are judged on every round (`_figures`). Pooled samples
and the raw per-round numbers are in the JSON.
"""

from __future__ import annotations

from pathlib import Path

from _common import (
    MIRRORING_PATHS,
    BenchConfig,
    Outcome,
    load_spec,
    merge,
    servers_for,
    summary,
    ttft_ms,
)
from _evidence import MirrorShares
from _figures import Figure, figure
from _load import LoadResult, run_load
from _paths import Layout
from _procs import CpuMarks

QUANTILES = (("p50", 50.0), ("p99", 99.0))
INFORMATIVE = ("nginx-plain", "nginx", "nginx-mirror", "nginx-mirror-headers", "bare",
               "unsampled")
PEER = "nginx-mirror"  # the peer that does the proxy's work


def cpu_reference(path: str) -> str:
    """What a path's CPU cost is printed against: the proxy against the peer doing its work."""
    return {"proxy": PEER, "nginx-mirror-headers": PEER, "nginx": ""}.get(path, "nginx")


def latency(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """TTFT at `latency_concurrency` streams: direct, then through every relay, per round."""
    out = Outcome()
    pooled = {p: LoadResult() for p in cfg.paths}
    ttft: dict[str, dict[str, list[float]]] = {p: {q: [] for q, _ in QUANTILES} for p in cfg.paths}
    cpu_ms: dict[str, list[float]] = {p: [] for p in cfg.paths}
    own_cpu_ms: list[float] = []
    request_s = cfg.latency_tokens * cfg.latency_itl_ms / 1000
    with servers_for(cfg, layout, tmp, 0.0, cfg.latency_itl_ms) as servers:
        shares = MirrorShares(servers.get("shadow"), servers.get("proxy"),
                              tuple(p for p in cfg.paths if p in MIRRORING_PATHS))
        for _ in range(cfg.reps):
            for path in cfg.paths:
                spec = load_spec(cfg, layout, servers[path].port, cfg.latency_concurrency,
                                 cfg.latency_tokens, request_s)
                marks = CpuMarks(servers[path].pid)
                shares.before(path)
                result = run_load(spec, on_window=marks)
                shares.after(path, result.completed)
                merge(pooled[path], result)
                for q, x in QUANTILES:
                    ttft[path][q].append(ttft_ms(result, x))
                requests = max(1.0, result.events / cfg.latency_tokens)
                cpu_ms[path].append(marks.seconds * 1000 / requests)
                if path == "proxy":
                    own_cpu_ms.append(marks.own_seconds * 1000 / requests)
        shares.finish()
    direct = ttft["direct"]
    added: dict[str, dict[str, list[float]]] = {p: {q: [v - d for v, d in zip(ttft[p][q], direct[q])] for q, _ in QUANTILES}
             for p in cfg.paths}
    out.raw = {"concurrency": cfg.latency_concurrency, "ttft_ms_rounds": ttft,
               "added_ms_rounds": added, "cpu_ms_per_request_rounds": cpu_ms,
               "proxy_relay_process_cpu_ms_per_request_rounds": own_cpu_ms,
               "mirror_shares": shares.shares(),
               "pooled": {p: summary(r) for p, r in pooled.items()}}
    out.errors = {p: r.errors for p, r in pooled.items()}
    conc = cfg.latency_concurrency
    for q, _ in QUANTILES:
        out.figures.append(figure("latency", f"direct TTFT {q} @{conc}", direct[q], "ms"))
    for name in INFORMATIVE:
        if name in added:
            out.figures += [figure("latency", f"{name} added TTFT {q}", added[name][q], "ms",
                                   reference="direct", reference_rounds=direct[q])
                            for q, _ in QUANTILES]
    out.figures += _cpu_figures(cfg, cpu_ms, own_cpu_ms)
    out.figures += shares.figures("latency")
    if "proxy" in added:
        out.figures += _targets(added, conc, direct)
    return out


def _cpu_figures(cfg: BenchConfig, cpu_ms: dict[str, list[float]],
                 own_cpu_ms: list[float]) -> list[Figure]:
    """CPU per request does not depend on what else runs on the machine: the cost to cut."""
    out = []
    events = f"({cfg.latency_tokens} events)"
    if own_cpu_ms and "nginx" in cpu_ms:
        # With a capture worker: what stays on the relay's core (the client path).
        out.append(figure("latency", f"proxy relay process alone, CPU per request {events}",
                          own_cpu_ms, "ms", reference="nginx", reference_rounds=cpu_ms["nginx"],
                          compare="ratio"))
    for path, rounds in cpu_ms.items():
        if path == "direct":
            continue
        ref = cpu_reference(path)
        ref_rounds = cpu_ms.get(ref, []) if ref else []
        out.append(figure("latency", f"{path} CPU per request {events}", rounds, "ms",
                          reference=ref if ref_rounds else "", reference_rounds=ref_rounds,
                          compare="ratio" if ref_rounds else ""))
    return out


def _targets(added: dict[str, dict[str, list[float]]], conc: int,
             direct: dict[str, list[float]]) -> list[Figure]:
    """The issue's targets: p50 <= 1 ms and <= the peer's; p99 <= the peer's and <= 3 ms."""
    out = []
    proxy = added["proxy"]
    out.append(figure("latency", f"proxy added TTFT p50 @{conc}", proxy["p50"], "ms",
                      reference="direct", reference_rounds=direct["p50"], target="<= 1 ms",
                      op="<=", limit=1.0))
    if PEER in added:
        for q in ("p50", "p99"):
            out.append(figure("latency", f"proxy added TTFT {q} vs {PEER}", proxy[q], "ms",
                              reference=f"{PEER} added", reference_rounds=added[PEER][q],
                              compare="delta", target=f"<= {PEER}", op="<=", limit=0.0,
                              judge_relation=True))
    out.append(figure("latency", f"proxy added TTFT p99 @{conc}", proxy["p99"], "ms",
                      reference="direct", reference_rounds=direct["p99"], target="<= 3 ms",
                      op="<=", limit=3.0))
    return out
