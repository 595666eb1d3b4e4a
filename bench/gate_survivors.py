"""How often a new version that hangs on some requests passes the error check, judged on
the records written so far (the order answers end) or on the start-order prefix (every
record started before the oldest exchange still out: `Mirror.judged_until`).

Each run: Poisson arrivals at `--rate` requests/s; old and new answer in `--answer-s`
seconds (uniform 0.5x-1.5x), except that new hangs on `--hang` of requests until the
shadow timeout (`--timeout-s`) and is recorded then as an error. Every `--look-s` seconds
up to the analysis timeout, the gate's own paired error check
(`proxy.gate.checks.error_rate`, at the default criteria) judges the `ErrorPairs` of the
records in scope; the first pass or fail ends the run. The cutoff here is the definition
(the oldest start still out), not the proxy's code; the statistics are the product's.

    python bench/gate_survivors.py [--runs 200] [--rate 5] [--hang 0.02,0.1] [--smoke]
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import sys

from proxy.gate.checks import error_rate
from proxy.gate.tally import ErrorPairs, GateInputs, MatchCounts
from proxy.gate.verdict import GateCriteria


def _run(rng: random.Random, rate: float, hang: float, answer_s: float, timeout_s: float,
         look_s: float, horizon_s: float, start_order: bool,
         criteria: GateCriteria) -> tuple[str, float]:
    """('pass' | 'fail' | 'undecided', seconds) of one simulated cutover."""
    starts: list[float] = []
    t = 0.0
    while t < horizon_s + timeout_s:
        t += rng.expovariate(rate)
        starts.append(t)
    hung = [rng.random() < hang for _ in starts]
    ends = [s + (timeout_s if h else answer_s * rng.uniform(0.5, 1.5))
            for s, h in zip(starts, hung, strict=True)]
    look = look_s
    while look <= horizon_s:
        ended = [i for i, end in enumerate(ends) if end <= look]
        if start_order:
            out = [starts[i] for i in range(bisect.bisect_right(starts, look))
                   if ends[i] > look]
            until = min(out, default=look)
            ended = [i for i in ended if starts[i] < until]
        n = len(ended)
        errors = sum(hung[i] for i in ended)
        inputs = GateInputs(MatchCounts(), requests={"primary": n, "shadow": n},
                            errors={"primary": 0, "shadow": errors},
                            error_pairs=ErrorPairs(n, errors, 0))
        status = error_rate(inputs, criteria).status
        if status != "inconclusive":
            return status, look
        look += look_s
    return "undecided", horizon_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0, help="requests/s (default 5)")
    p.add_argument("--hang", default="0.02,0.1", help="shares of requests new hangs on")
    p.add_argument("--answer-s", type=float, default=2.0)
    p.add_argument("--timeout-s", type=float, default=120.0, help="the shadow timeout")
    p.add_argument("--look-s", type=float, default=5.0)
    p.add_argument("--horizon-s", type=float, default=600.0, help="analysis timeout")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a few runs, a short horizon")
    args = p.parse_args(argv)
    if args.smoke:
        args.runs, args.horizon_s = 5, 200.0
    criteria = GateCriteria()
    print(f"{args.runs} runs a cell, {args.rate:g} req/s, answers {args.answer_s:g} s, "
          f"shadow timeout {args.timeout_s:g} s, a look every {args.look_s:g} s up to "
          f"{args.horizon_s:g} s; the gate's paired error check at the defaults")
    print(f"{'hang':>6} {'judged':>12} {'passed':>8} {'failed':>8} {'undecided':>10} "
          f"{'median s to a decision':>24}")
    for hang in (float(h) for h in args.hang.split(",")):
        for start_order in (False, True):
            rng = random.Random(args.seed)
            ends = [_run(rng, args.rate, hang, args.answer_s, args.timeout_s, args.look_s,
                         args.horizon_s, start_order, criteria) for _ in range(args.runs)]
            decided = [s for status, s in ends if status != "undecided"]
            median = f"{statistics.median(decided):.0f}" if decided else "-"
            counts = {k: sum(status == k for status, _ in ends)
                      for k in ("pass", "fail", "undecided")}
            print(f"{hang:>6.0%} {'start order' if start_order else 'as ended':>12} "
                  f"{counts['pass']:>8} {counts['fail']:>8} {counts['undecided']:>10} "
                  f"{median:>24}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
