"""Benchmark of the container cutover on the real Docker engine, under steady client load.

    python bench/cutover_bench.py             # 3 rounds, about 2.5 minutes (+40 s to build the sim image)
    python bench/cutover_bench.py --smoke     # 1 round of short windows: proves it runs
    python bench/cutover_bench.py --json-out cutover.json --keep-logs

Old and new are sim containers (`vllm-cutover sim`, TTFT 40 ms, ITL 15 ms) behind
`vllm-cutover proxy --driver docker`; 32 clients stream chat and completions and a probe
sends a one-token unstreamed completion every 10 ms, whose fingerprint says who answered.
Each round: a control window and a switch window (the promotion mid-window), in
alternating order; a rollback with the old container running; a second cutover taken to
`done` (old stopped) and rolled back. Prints, per figure, the median over the rounds with
its [min..max], the same-run reference, and the target's verdict (bench/_figures.py).
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

BENCH_DIR = Path(__file__).resolve().parent
for path in (BENCH_DIR, BENCH_DIR.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from _cutover_figures import RoundMarks, failures, figures, round_numbers
from _cutover_load import LoadProcess
from _cutover_stack import (
    NEW_VERSION,
    OLD_VERSION,
    Pacing,
    Stack,
    cutover_stack,
    fingerprint,
    sim_image,
)
from _figures import render_table


@dataclass(frozen=True)
class Config:
    mode: Literal["full", "smoke"]
    rounds: int
    window_s: float  # each of the control and the switch windows
    settle_s: float  # after each phase change, before the next window or command
    clients: int
    probe_interval_ms: float
    max_tokens: int
    pacing: Pacing = field(default_factory=Pacing)
    sim_image: str | None = None


def _window(seconds: float) -> tuple[float, float]:
    start = time.perf_counter()
    time.sleep(seconds)
    return start, time.perf_counter()


def one_round(stack: Stack, cfg: Config, index: int) -> RoundMarks:
    """Control and switch windows of one cutover (their order alternating over rounds),
    its rollback with old running; then a cutover to `done` and its rollback."""
    stack.start(post_promotion_s=3600.0)
    time.sleep(cfg.settle_s)
    control_first = index % 2 == 0
    if control_first:  # while shadowing (new is the shadow) ...
        control = _window(cfg.window_s)
    switch_start = time.perf_counter()
    time.sleep(cfg.window_s / 2)
    promote = stack.command("promote", "promoting", {"force": True})
    time.sleep(max(0.0, switch_start + cfg.window_s - time.perf_counter()))
    switch_window = (switch_start, time.perf_counter())
    time.sleep(cfg.settle_s)
    if not control_first:  # ... or after the promotion (old is the shadow)
        control = _window(cfg.window_s)
        time.sleep(cfg.settle_s)
    rollback_running = stack.rollback()
    time.sleep(cfg.settle_s)
    stack.start(post_promotion_s=0.0)
    stack.command("promote", "promoting", {"force": True})
    stack.proxy.wait_phase(["done"], 300)
    time.sleep(cfg.settle_s)
    rollback_stopped = stack.rollback()
    time.sleep(cfg.settle_s)
    return RoundMarks(index, control, switch_window, promote, rollback_running,
                      rollback_stopped)


def run(cfg: Config, json_out: Path | None, keep_logs: bool) -> int:
    import docker
    import docker.errors

    try:
        client = docker.from_env(version="auto", timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise SystemExit(f"no Docker engine answers ({exc}): start dockerd first") from None
    work = Path(tempfile.mkdtemp(prefix="cutover-bench-"))
    load_before = os.getloadavg()
    print(f"cutover_bench: mode={cfg.mode} rounds={cfg.rounds} window={cfg.window_s:g} s "
          f"clients={cfg.clients} probe every {cfg.probe_interval_ms:g} ms load average={load_before[0]:.1f} "
          f"logs={work}", flush=True)
    started = time.perf_counter()
    marks: list[RoundMarks] = []
    loadavg: list[float] = []
    try:
        images = sim_image(client, work, cfg.sim_image)
        print(f"  images ready ({time.perf_counter() - started:.0f} s)", flush=True)
        with cutover_stack(client, work, images, cfg.pacing) as stack:
            steady = LoadProcess("steady", stack.proxy.url, cfg.pacing.model, work,
                                 clients=cfg.clients, max_tokens=cfg.max_tokens)
            probe = LoadProcess("probe", stack.proxy.url, cfg.pacing.model, work,
                                interval_ms=cfg.probe_interval_ms)
            loads = (steady, probe)
            for load in loads:
                load.start()
            try:
                time.sleep(2 * cfg.settle_s)
                for index in range(cfg.rounds):
                    t = time.perf_counter()
                    if not all(load.alive() for load in loads):
                        raise RuntimeError("a client load process died; see its log in "
                                           f"{work}")
                    marks.append(one_round(stack, cfg, index))
                    loadavg.append(os.getloadavg()[0])
                    print(f"  round {index + 1}: {time.perf_counter() - t:.0f} s, load average "
                          f"{loadavg[-1]:.1f}", flush=True)
            finally:
                steady_out, probe_out = (load.stop() for load in loads)
    finally:
        if not keep_logs:
            shutil.rmtree(work, ignore_errors=True)
    old_fp, new_fp = fingerprint(OLD_VERSION), fingerprint(NEW_VERSION)
    numbers = [round_numbers(m, steady_out, probe_out, old_fp, new_fp) for m in marks]
    failed = failures(steady_out, probe_out)
    answered = len(steady_out) + len(probe_out)
    table = figures(numbers, sum(failed.values()), answered)
    print()
    print(render_table(table))
    verdicts = [f.verdict for f in table if f.verdict != "-"]
    print(f"\ntargets: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL, "
          f"{verdicts.count('noise')} within noise (over {cfg.rounds} rounds); "
          f"{answered} requests ({len(probe_out)} probes), failed or short: {failed or 'none'}; "
          f"took {time.perf_counter() - started:.0f} s; load average {load_before[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f} (per round: {', '.join(f'{v:.1f}' for v in loadavg)})")
    if json_out is not None:
        document: dict[str, Any] = {
            "config": asdict(cfg),
            "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                     "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                     "loadavg_rounds": loadavg},
            "figures": [f.to_json() for f in table],
            "rounds": [{"marks": asdict(m), "numbers": n} for m, n in zip(marks, numbers)],
            "failures": failed, "requests": {"steady": len(steady_out), "probe": len(probe_out)},
            "took_s": time.perf_counter() - started,
        }
        json_out.write_text(json.dumps(document, indent=2) + "\n")
        print(f"JSON: {json_out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="1 round, 3 s windows, 8 clients: proves the harness runs")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 3; 1 with --smoke)")
    parser.add_argument("--window", type=float, default=0.0,
                        help="seconds of each control and switch window (default 8; 3 with --smoke)")
    parser.add_argument("--clients", type=int, default=0,
                        help="steady streaming clients (default 32; 8 with --smoke)")
    parser.add_argument("--probe-interval-ms", type=float, default=10.0,
                        help="one 1-token unstreamed probe completion every MS (default "
                        "%(default)s): the switch is located to within it")
    parser.add_argument("--max-tokens", type=int, default=24,
                        help="tokens per steady request (default %(default)s)")
    parser.add_argument("--ttft-ms", type=float, default=40.0, help="the sims' TTFT")
    parser.add_argument("--itl-ms", type=float, default=15.0, help="the sims' ITL")
    parser.add_argument("--sim-image", metavar="IMAGE",
                        help="a built sim image (images/sim) instead of building one")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the proxy's and the loads' logs")
    args = parser.parse_args(argv)
    mode: Literal["full", "smoke"] = "smoke" if args.smoke else "full"
    rounds, window, clients, settle = {"full": (3, 8.0, 32, 2.0), "smoke": (1, 3.0, 8, 1.0)}[mode]
    cfg = Config(mode=mode, rounds=args.rounds or rounds, window_s=args.window or window,
                 settle_s=settle, clients=args.clients or clients,
                 probe_interval_ms=args.probe_interval_ms,
                 max_tokens=args.max_tokens,
                 pacing=Pacing(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms),
                 sim_image=args.sim_image)
    if not cfg.probe_interval_ms > 0:
        parser.error(f"--probe-interval-ms must be > 0, got {cfg.probe_interval_ms!r}")
    for name in ("rounds", "clients", "max_tokens"):
        if getattr(cfg, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)!r}")
    if cfg.window_s < 3.0:  # the switch +-1 s (SLICE_S) inside it, with a margin
        parser.error(f"--window must be >= 3 s, got {cfg.window_s!r}")
    return run(cfg, args.json_out, args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
