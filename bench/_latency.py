"""Latency scenarios: TTFT added by each relay, and the primary's TTFT under bad shadows.

Figures are medians over the interleaved rounds of per-round percentiles (and, for the
added latency, of per-round differences to the direct path), so one noisy round on a
shared machine does not decide the verdict; the pooled samples are in the raw JSON.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

from _common import BenchConfig, Outcome, load_spec, median, merge, servers_for, summary, ttft_ms
from _figures import Figure
from _load import LoadResult, run_load
from _paths import Layout, backend, mirror_counters, mirroring_proxy
from _procs import CpuMarks, dead_port, free_port

QUANTILES = (("p50", 50.0), ("p99", 99.0))


def latency(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """TTFT at `latency_concurrency` streams: direct, then through every relay, per round."""
    out = Outcome()
    pooled = {p: LoadResult() for p in cfg.paths}
    rounds: list[dict[str, LoadResult]] = []
    cpu_s = {p: 0.0 for p in cfg.paths}
    own_cpu_s = {p: 0.0 for p in cfg.paths}
    request_s = cfg.latency_tokens * cfg.latency_itl_ms / 1000
    with servers_for(cfg, layout, tmp, 0.0, cfg.latency_itl_ms) as servers:
        for _ in range(cfg.reps):
            this_round = {}
            for path in cfg.paths:
                spec = load_spec(cfg, layout, servers[path].port, cfg.latency_concurrency,
                                 cfg.latency_tokens, request_s)
                marks = CpuMarks(servers[path].pid)
                this_round[path] = run_load(spec, on_window=marks)
                cpu_s[path] += marks.seconds
                own_cpu_s[path] += marks.own_seconds
                merge(pooled[path], this_round[path])
            rounds.append(this_round)
        counters = mirror_counters(servers["proxy"]) if "proxy" in servers else {}
    per_round = [{p: {q: ttft_ms(r, x) for q, x in QUANTILES} for p, r in rnd.items()}
                 for rnd in rounds]
    ttft = {p: {q: median([rnd[p][q] for rnd in per_round]) for q, _ in QUANTILES}
            for p in cfg.paths}
    added = {p: {q: median([rnd[p][q] - rnd["direct"][q] for rnd in per_round])
                 for q, _ in QUANTILES} for p in cfg.paths}
    out.raw = {"concurrency": cfg.latency_concurrency, "rounds": per_round,
               "proxy_counters": counters,
               "median_ttft_ms": ttft, "median_added_ms": added,
               "pooled": {p: summary(r) for p, r in pooled.items()}}
    out.errors = {p: r.errors for p, r in pooled.items()}
    conc = cfg.latency_concurrency
    for q, _ in QUANTILES:
        out.figures.append(Figure("latency", f"direct TTFT {q} @{conc}", ttft["direct"][q], "ms"))
    for path in ("nginx-plain", "nginx", "bare", "unsampled"):
        if path in added:
            for q, _ in QUANTILES:
                out.figures.append(Figure("latency", f"{path} added TTFT {q}", added[path][q], "ms",
                                          reference="direct", reference_value=ttft["direct"][q]))
    # CPU per request does not depend on what else runs on the machine: the cost to optimise.
    cpu_ms = {p: cpu_s[p] * 1000 / max(1.0, pooled[p].events / cfg.latency_tokens)
              for p in cfg.paths if p != "direct"}
    out.raw["relay_cpu_ms_per_request"] = cpu_ms
    if "proxy" in cpu_ms and own_cpu_s["proxy"] < cpu_s["proxy"]:
        # With a capture worker: what stays on the relay's core (the client path).
        own = own_cpu_s["proxy"] * 1000 / max(1.0, pooled["proxy"].events / cfg.latency_tokens)
        out.raw["proxy_relay_process_cpu_ms_per_request"] = own
        out.figures.append(Figure(
            "latency", f"proxy relay process alone, CPU per request ({cfg.latency_tokens} "
            "events)", own, "ms", reference="nginx" if "nginx" in cpu_ms else "",
            reference_value=cpu_ms.get("nginx"), compare="ratio"))
    for path, value in cpu_ms.items():
        out.figures.append(Figure(
            "latency", f"{path} CPU per request ({cfg.latency_tokens} events)", value, "ms",
            reference="nginx" if path != "nginx" and "nginx" in cpu_ms else "",
            reference_value=cpu_ms.get("nginx") if path != "nginx" else None, compare="ratio",
        ))
    if counters:
        # The shadow backends run at idle priority on the load CPUs: this shows they still
        # answered (cut-off requests at the end of each window count as not comparable).
        mirrored = counters.get('vllm_cutover_shadow_mirrored_total{role="shadow"}', 0.0)
        compared = sum(counters.get(
            f'vllm_cutover_comparisons_total{{against="shadow",deterministic="true",'
            f'outcome="{outcome}"}}', 0.0) for outcome in ("match", "diverged"))
        out.figures.append(Figure("latency", "proxy mirrors compared, of mirrored", compared,
                                  "", reference="mirrored", reference_value=mirrored,
                                  compare="ratio"))
    if "proxy" in added:
        for q, limit in (("p50", 1.0), ("p99", 3.0)):
            value = added["proxy"][q]
            out.figures.append(Figure(
                "latency", f"proxy added TTFT {q} @{conc}", value, "ms", reference="direct",
                reference_value=ttft["direct"][q], target=f"<= {limit:g} ms",
                passed=value <= limit if not math.isnan(value) else False,
            ))
        # The reference is nginx as a plain reverse proxy (Debian defaults); nginx
        # tuned for streaming is the stricter one. Each is its own verdict.
        for ref in ("nginx-plain", "nginx"):
            if ref in added:
                value, ref_value = added["proxy"]["p50"], added[ref]["p50"]
                out.figures.append(Figure(
                    "latency", f"proxy added TTFT p50 vs {ref}", value, "ms",
                    reference=f"{ref} added", reference_value=ref_value, compare="delta",
                    target=f"<= {ref}", passed=value <= ref_value if not math.isnan(value)
                    else False,
                ))
    return out


def impact(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """Primary TTFT through the proxy with a normal, a `slow_factor`x slower and a dead shadow."""
    out = Outcome()
    if "proxy" not in cfg.paths:
        return out
    variants = ("normal", "slow", "dead")
    pooled = {v: LoadResult() for v in variants}
    per_round: list[dict[str, dict[str, float]]] = []
    slow_ttft, slow_itl = cfg.impact_ttft_ms * cfg.slow_factor, cfg.impact_itl_ms * cfg.slow_factor
    request_s = (cfg.impact_ttft_ms + cfg.impact_tokens * cfg.impact_itl_ms) / 1000
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(backend(layout, cfg.backend, "primary", free_port(),
                                              cfg.impact_ttft_ms, cfg.impact_itl_ms))
        normal = stack.enter_context(backend(layout, cfg.backend, "shadow", free_port(),
                                             cfg.impact_ttft_ms, cfg.impact_itl_ms,
                                             mirror_target=True))
        slow = stack.enter_context(backend(layout, cfg.backend, "slow-shadow", free_port(),
                                           slow_ttft, slow_itl, mirror_target=True))
        shadows = {"normal": normal.url, "slow": slow.url,
                   "dead": f"http://127.0.0.1:{dead_port()}"}
        proxies = {
            v: stack.enter_context(mirroring_proxy(
                layout, free_port(), primary.url, shadows[v], None, tmp / f"impact-{v}.sqlite",
                cfg.proxy_args))
            for v in variants
        }
        for _ in range(cfg.reps):
            this_round = {}
            for v in variants:
                spec = load_spec(cfg, layout, proxies[v].port, cfg.impact_concurrency,
                                 cfg.impact_tokens, request_s)
                result = run_load(spec)
                merge(pooled[v], result)
                this_round[v] = {q: ttft_ms(result, x) for q, x in QUANTILES}
            per_round.append(this_round)
        counters = {v: mirror_counters(proxies[v]) for v in variants}
    p99 = {v: median([rnd[v]["p99"] for rnd in per_round]) for v in variants}
    ratio = {v: median([rnd[v]["p99"] / rnd["normal"]["p99"] for rnd in per_round])
             for v in variants}
    out.raw = {"concurrency": cfg.impact_concurrency, "primary_ttft_ms": cfg.impact_ttft_ms,
               "slow_factor": cfg.slow_factor, "rounds": per_round, "proxy_counters": counters, "median_p99_ms": p99,
               "median_p99_ratio": ratio, "pooled": {v: summary(r) for v, r in pooled.items()}}
    out.errors = {f"{v}-shadow": r.errors for v, r in pooled.items()}
    out.figures.append(Figure("impact", "primary TTFT p99, normal shadow", p99["normal"], "ms"))
    normal_rounds = [rnd["normal"]["p99"] for rnd in per_round]
    if len(normal_rounds) > 1 and min(normal_rounds) > 0:
        # The noise floor to read the ratios against: the same setup, round to round.
        out.figures.append(Figure("impact", "normal-shadow p99 spread over rounds (max/min)",
                                  max(normal_rounds) / min(normal_rounds), "x"))
    for v, label in (("slow", f"{cfg.slow_factor:g}x slower"), ("dead", "dead")):
        value = ratio[v]
        out.figures.append(Figure(
            "impact", f"primary TTFT p99 ratio, {label} shadow", value, "x",
            reference=f"normal shadow ({p99['normal']:.2f} ms), then {p99[v]:.2f} ms",
            target="<= 1.05", passed=value <= 1.05 if not math.isnan(value) else False,
        ))
    return out
