"""The impact scenario: the primary's TTFT through a mirroring relay whose shadow is slow or dead.

For the proxy and for nginx's mirror (`nginx-mirror`, when measured), each with a normal,
a `slow_factor`x slower and a dead shadow (a port with nothing listening): the p99 TTFT
with a bad shadow over the p99 with the normal one, in the same round. nginx finishes a
request only when its mirror subrequests end, and reads the client connection's next
request only then; the proxy never waits for a mirror. Measured, not assumed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from _common import BenchConfig, Outcome, load_spec, merge, summary, ttft_ms
from _evidence import MirrorShares
from _figures import figure
from _load import LoadResult, run_load
from _paths import Layout, Server, backend, mirroring_proxy, nginx
from _procs import dead_port, free_port

VARIANTS = ("normal", "slow", "dead")
RELAYS = ("proxy", "nginx-mirror")


def impact(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Primary TTFT p99 with a slow or dead shadow / with a normal one, per relay and round."""
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    relays: list[str] = [r for r in RELAYS if r in cfg.paths]
    runs = [(r, v) for r in relays for v in VARIANTS]
    pooled = {run: LoadResult() for run in runs}
    p99: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    slow_ttft, slow_itl = cfg.impact_ttft_ms * cfg.slow_factor, cfg.impact_itl_ms * cfg.slow_factor
    request_s = (cfg.impact_ttft_ms + cfg.impact_tokens * cfg.impact_itl_ms) / 1000
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(backend(layout, cfg.backend, "primary", free_port(),
                                              cfg.impact_ttft_ms, cfg.impact_itl_ms))
        shadows = {
            "normal": stack.enter_context(backend(
                layout, cfg.backend, "shadow", free_port(), cfg.impact_ttft_ms,
                cfg.impact_itl_ms, mirror_target=True)),
            "slow": stack.enter_context(backend(
                layout, cfg.backend, "slow-shadow", free_port(), slow_ttft, slow_itl,
                mirror_target=True)),
        }
        ports = {"normal": shadows["normal"].port, "slow": shadows["slow"].port,
                 "dead": dead_port()}
        servers: dict[tuple[str, str], Server] = {}
        for v in VARIANTS:
            servers[("proxy", v)] = stack.enter_context(mirroring_proxy(
                layout, free_port(), primary.url, f"http://127.0.0.1:{ports[v]}", None,
                tmp / f"impact-{v}.sqlite", cfg.proxy_args))
            if "nginx-mirror" in relays:
                servers[("nginx-mirror", v)] = stack.enter_context(nginx(
                    layout, f"nginx-mirror-{v}", free_port(), primary.port,
                    tmp / f"impact-nginx-mirror-{v}", "mirror", [ports[v]]))
        shares = {v: MirrorShares(shadows[v], servers[("proxy", v)], tuple(relays))
                  for v in ("normal", "slow")}
        for _ in range(cfg.reps):
            for relay, v in runs:
                spec = load_spec(cfg, layout, servers[(relay, v)].port, cfg.impact_concurrency,
                                 cfg.impact_tokens, request_s)
                if v in shares:
                    shares[v].before(relay)
                result = run_load(spec)
                if v in shares:
                    shares[v].after(relay, result.completed)
                merge(pooled[(relay, v)], result)
                p99[(relay, v)].append(ttft_ms(result, 99))
        for tracker in shares.values():
            tracker.finish()
    ratio = {(r, v): [bad / normal for bad, normal in zip(p99[(r, v)], p99[(r, "normal")])]
             for r, v in runs}
    out.raw = {"concurrency": cfg.impact_concurrency, "primary_ttft_ms": cfg.impact_ttft_ms,
               "slow_factor": cfg.slow_factor,
               "p99_ms_rounds": {f"{r}/{v}": p99[(r, v)] for r, v in runs},
               "p99_ratio_rounds": {f"{r}/{v}": ratio[(r, v)] for r, v in runs},
               "mirror_shares": {v: s.shares() for v, s in shares.items()},
               "pooled": {f"{r}/{v}": summary(res) for (r, v), res in pooled.items()}}
    out.errors = {f"{r}/{v}-shadow": res.errors for (r, v), res in pooled.items()}
    for relay in relays:
        out.figures.append(figure("impact", f"{relay}: primary TTFT p99, normal shadow",
                                  p99[(relay, "normal")], "ms"))
    peer = "nginx-mirror" if "nginx-mirror" in relays else ""
    for v, label in (("slow", f"{cfg.slow_factor:g}x slower"), ("dead", "dead")):
        # nginx-mirror's ratio in the same case stands beside ours, as the reference.
        out.figures.append(figure(
            "impact", f"proxy: primary TTFT p99 ratio, {label} shadow", ratio[("proxy", v)], "x",
            reference=peer, reference_rounds=ratio[(peer, v)] if peer else (),
            target="<= 1.05", op="<=", limit=1.05))
    for v, label in (("normal", ", normal shadow"), ("slow", f", {cfg.slow_factor:g}x slower shadow")):
        out.figures += shares[v].figures("impact", label)
    return out
