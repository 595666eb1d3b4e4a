"""What the newest-5,000 window cost the p99 checks, and what every sample in buckets gives:
identical old, new and baseline (TTFT and TPOT lognormal, the tail of a loaded host), the
gate's own `evaluate` at a look every `--every` requests, judged two ways on the same
runs:

- window: the p99 checks read the newest `tally.LATENCY_WINDOW` requests' samples (the
  gate before this change);
- buckets: they read every sample since the start in 0.1 % log buckets
  (`GateInputs.tails`, `proxy.gate.sketch`), as the store now gives them.

Prints, per way, how many runs promoted within `--requests` a side and the median
requests a side to promotion; the run-to-run spread is the runs themselves.

    python bench/gate_window.py [--runs 10] [--requests 20000] [--every 1000] [--sigma 0.9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from proxy.gate.criteria import GateCriteria
from proxy.gate.sketch import LogHistogram
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import LATENCY_WINDOW, GateInputs, MatchCounts, Pairs
from proxy.gate.verdict import evaluate

ROLES = ("primary", "shadow", "baseline")


def _draws(rng: np.random.Generator, n: int, sigma: float) -> dict[str, dict[str, np.ndarray]]:
    return {role: {"ttft": rng.lognormal(np.log(0.05), sigma, n),
                   "tpot": rng.lognormal(np.log(0.01), sigma / 3, n)} for role in ROLES}


def _inputs(draws: dict[str, dict[str, np.ndarray]], n: int,
            tails: dict[str, dict[str, LogHistogram]] | None) -> GateInputs:
    lo = max(0, n - LATENCY_WINDOW)
    latency = {role: LatencySamples(ttft_s=tuple(d["ttft"][lo:n]), tpot_s=tuple(d["tpot"][lo:n]),
                                    output_tokens=(10,) * (n - lo)) for role, d in draws.items()}
    pairs = {m: Pairs(tuple(draws["baseline"][m][lo:n]), tuple(draws["shadow"][m][lo:n]),
                      "capture worker") for m in ("ttft", "tpot")}
    pairs["output_tokens"] = Pairs((10.0,) * (n - lo), (10.0,) * (n - lo), "request")
    return GateInputs(MatchCounts(n), MatchCounts(n), latency,
                      {r: n for r in ROLES}, {r: 0 for r in ROLES}, None, pairs,
                      tails=tails or {})


def _one_run(seed: int, args: argparse.Namespace) -> dict[str, int | None]:
    rng = np.random.default_rng(seed)
    draws = _draws(rng, args.requests, args.sigma)
    tails = {role: {m: LogHistogram() for m in ("ttft", "tpot")} for role in ROLES}
    promoted: dict[str, int | None] = {"window": None, "buckets": None}
    criteria = GateCriteria()
    for n in range(args.every, args.requests + 1, args.every):
        for role in ROLES:
            for m in ("ttft", "tpot"):
                tails[role][m].add(draws[role][m][n - args.every:n].tolist())
        frozen = {r: {m: h.frozen() for m, h in of.items()} for r, of in tails.items()}
        for way, t in (("window", None), ("buckets", frozen)):
            if promoted[way] is None and evaluate(_inputs(draws, n, t), criteria).verdict \
                    == "pass":
                promoted[way] = n
        if all(v is not None for v in promoted.values()):
            break
    return promoted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--sigma", type=float, default=0.9, help="TTFT's log-sd")
    args = parser.parse_args(argv)
    results = [_one_run(seed, args) for seed in range(args.runs)]
    print(f"identical versions, TTFT lognormal sigma {args.sigma:g}, {args.runs} runs, a look "
          f"every {args.every}, up to {args.requests} requests a side")
    for way in ("window", "buckets"):
        at = [n for r in results if (n := r[way]) is not None]
        median = f"{statistics.median(at):,.0f}" if at else "-"
        spread = f"[{min(at):,}..{max(at):,}]" if at else ""
        print(f"  {way:8s} promoted {len(at)}/{args.runs}, median requests a side "
              f"{median} {spread}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
