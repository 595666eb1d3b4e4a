"""How often the cutover's early end ("the gate cannot decide before the analysis timeout")
ends a cutover that would have decided, and how soon it ends one that would not.

Each run is one simulated cutover at `--rate` requests/s, every request deterministic and
streamed, mirrored to new and to a baseline. Every `--look-s` seconds from the analysis
delay to the timeout the gate's own `proxy.gate.verdict.evaluate` judges real `GateInputs`
(match counts, the newest 5,000 requests' latency, TTFT/TPOT pairs baseline-vs-shadow as
the capture worker records them), and the cutover's own rule decides: a pass promotes, a
fail on 3 looks in a row aborts (`Reconciler`'s failure limit), and otherwise
`proxy.cutover.eta` estimates the binding check's time left; `hopeless_since` /
`ends_early` end the cutover early exactly as `proxy.cutover.phases.shadowing` does.

Looks here are sparser than the reconciler's one a second: a hopeless streak is reset by
any look that is not hopeless, so sparser looks end cutovers early more often, not less
(the false early-end rate here is an upper bound of the live one).

Latency model: a request's own cost r (lognormal, sigma 0.45: prompt and answer length)
shared by every side that answers it, times each side's own noise (lognormal, sigma 0.2);
new is `scale` times old, and `tail_share` of its first tokens are `tail_factor` late.

    python bench/gate_early_end.py [--runs 20] [--rate 5] [--cells clean,slower5] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.cutover.eta import ends_early, estimate, hopeless_since
from proxy.cutover.model import CutoverSpec
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import LATENCY_WINDOW, WORKER_BASIS, Pairs
from proxy.gate.verdict import GateCriteria, GateInputs, MatchCounts, evaluate

TTFT_S, TPOT_S, TOKENS = 0.2, 0.02, 200
SHARED_SIGMA, NOISE_SIGMA = 0.45, 0.2
FAILURE_LIMIT = CutoverSpec.failure_limit  # the reconciler's default
ANALYSIS_DELAY_S = 10.0


@dataclass(frozen=True)
class Cell:
    name: str
    what: str
    scale: float = 1.0  # new's TTFT and TPOT over old's
    tail_share: float = 0.0
    tail_factor: float = 1.0
    new_divergence: float = 0.02
    base_divergence: float = 0.02
    should: str = "promote"  # what a user wants: promote, or not promote


CELLS = [
    Cell("clean", "identical to old"),
    Cell("faster3", "3 % faster", scale=0.97),
    Cell("slower5", "5 % slower at p50 and TPOT (limit 1.10: acceptable)", scale=1.05),
    Cell("tail", "10 % of first tokens 2.2x late (TTFT p99 1.37x, p50 1.06x)",
         tail_share=0.10, tail_factor=2.2, should="not promote"),
    Cell("diverge", "diverges on 4.8 % vs 2 % noise (limit: 5 points more)",
         new_divergence=0.048),
    Cell("at_limit", "diverges on 7 % vs 2 % noise (exactly at the limit)",
         new_divergence=0.07, should="either; end early"),
    Cell("broken", "diverges on 15 % vs 2 % noise", new_divergence=0.15,
         should="not promote"),
]


@dataclass
class Run:
    outcome: str  # promoted, aborted (gate fail), ended early, timed out
    at_s: float
    samples: int
    without_rule: str = ""  # the outcome had the cutover shadowed on to the timeout


def simulate(cell: Cell, rng: np.random.Generator, rate: float, timeout_s: float,
             look_s: float, criteria: GateCriteria) -> Run:
    n_max = int(rate * timeout_s) + 1
    shared_ttft = TTFT_S * rng.lognormal(0, SHARED_SIGMA, n_max)
    shared_tpot = TPOT_S * rng.lognormal(0, SHARED_SIGMA, n_max)

    def side(scale: float) -> tuple[np.ndarray, np.ndarray]:
        return (shared_ttft * scale * rng.lognormal(0, NOISE_SIGMA, n_max),
                shared_tpot * scale * rng.lognormal(0, NOISE_SIGMA, n_max))

    primary, baseline, shadow = side(1.0), side(1.0), side(cell.scale)
    late = rng.random(n_max) < cell.tail_share
    shadow = (np.where(late, shadow[0] * cell.tail_factor, shadow[0]), shadow[1])
    new_diverged = np.cumsum(rng.random(n_max) < cell.new_divergence)
    base_diverged = np.cumsum(rng.random(n_max) < cell.base_divergence)
    failing, since, ended = 0, None, None
    at = ANALYSIS_DELAY_S
    while at <= timeout_s:
        n = int(rate * at)
        lo = max(0, n - LATENCY_WINDOW)

        inputs = GateInputs(
            new_vs_old=MatchCounts(n, int(new_diverged[n - 1])),
            baseline_vs_old=MatchCounts(n, int(base_diverged[n - 1])),
            latency={"primary": _window(primary, lo, n), "baseline": _window(baseline, lo, n),
                     "shadow": _window(shadow, lo, n)},
            requests={"primary": n, "baseline": n, "shadow": n},
            errors={"primary": 0, "baseline": 0, "shadow": 0},
            pairs={"ttft": Pairs(tuple(baseline[0][lo:n]), tuple(shadow[0][lo:n]), WORKER_BASIS),
                   "tpot": Pairs(tuple(baseline[1][lo:n]), tuple(shadow[1][lo:n]), WORKER_BASIS)})
        verdict = evaluate(inputs, criteria)
        failing = failing + 1 if verdict.verdict == "fail" else 0
        if verdict.verdict == "pass" or failing >= FAILURE_LIMIT:
            outcome = "promoted" if verdict.verdict == "pass" else "aborted"
            return replace(ended, without_rule=outcome) if ended else Run(outcome, at, n)
        if ended is None:
            est = estimate(verdict.checks, n / at, timeout_s - at, n)
            since = hopeless_since(since, est, at)
            if ends_early(since, at):
                ended = Run("ended early", at, n)  # and on, to see what it would have done
        at += look_s
    timed_out = Run("timed out", timeout_s, int(rate * timeout_s))
    return replace(ended, without_rule="timed out") if ended else timed_out


def _window(role: tuple[np.ndarray, np.ndarray], lo: int, n: int) -> LatencySamples:
    """One role's latency samples of requests lo..n (the gate's newest-5,000 window)."""
    ttft, tpot = role[0][lo:n], role[1][lo:n]
    return LatencySamples(ttft_s=tuple(ttft), tpot_s=tuple(tpot),
                          e2e_s=tuple(ttft + tpot * (TOKENS - 1)),
                          output_tokens=(TOKENS,) * (n - lo))


def _count(runs: list[Run], outcome: str) -> str:
    return f"{sum(r.outcome == outcome for r in runs)}/{len(runs)}"


def _median_s(runs: list[Run], outcome: str) -> str:
    times = [r.at_s for r in runs if r.outcome == outcome]
    return f"{statistics.median(times):.0f}" if times else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s (default 5)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="analysis timeout, s (default 1800, the cutover's)")
    parser.add_argument("--look-s", type=float, default=5.0)
    parser.add_argument("--cells", default=",".join(c.name for c in CELLS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="2 runs, 300 s: the harness runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.timeout = 2, 300.0
    wanted = args.cells.split(",")
    unknown = set(wanted) - {c.name for c in CELLS}
    if unknown:
        parser.error(f"unknown cells {sorted(unknown)}; known: {[c.name for c in CELLS]}")
    criteria = GateCriteria()
    print(f"{args.runs} runs a cell, {args.rate:g} req/s, looks every {args.look_s:g} s, "
          f"analysis timeout {args.timeout:g} s, default criteria")
    print("| true new version | wanted | promoted | aborted (gate) | ended early (of which "
          "would have promoted) | timed out | median s to promotion | median s to early end |")
    print("|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    for cell in (c for c in CELLS if c.name in wanted):
        rng = np.random.default_rng([args.seed, CELLS.index(cell)])
        runs = [simulate(cell, rng, args.rate, args.timeout, args.look_s, criteria)
                for _ in range(args.runs)]
        print(f"| {cell.what} | {cell.should} | {_count(runs, 'promoted')} "
              f"| {_count(runs, 'aborted')} | {_count(runs, 'ended early')} ("
              f"{sum(r.without_rule == 'promoted' for r in runs)}) "
              f"| {_count(runs, 'timed out')} | {_median_s(runs, 'promoted')} "
              f"| {_median_s(runs, 'ended early')} |", flush=True)
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
