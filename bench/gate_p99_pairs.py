"""Would a paired p99 check decide sooner than today's two bounds? (docs/GATE.md)

Today's p99 check passes when new's upper bound is within the limit L over old's lower
bound, each a confidence sequence (`sequential.quantile_ranks`) at half the pass alpha.
The paired design: a confidence sequence [lo, hi] for old's p99 t* at alpha_1, and on
pairs, for every bucket [a, b) of a 2 % grid that meets [lo, hi], a betting test that
rejects E[1[new > L a] - 1[old > b]] >= 0 at alpha_2 (alpha_1 + alpha_2 = 0.05). A version
beyond the limit has P(new > L a) >= 0.01 >= P(old > b) for the bucket holding t*, so a
wrong pass needs t* outside [lo, hi] or that bucket's test wrong: at most 5 % at every look.
Bets: 0.9 * 2^(-k/2), k = 0..13, even weights, fixed before any data.

Both judged at a look every 100 pairs, the p99 check alone (no other check, no floor),
for an identical version (and one exactly at the limit: how often each passes it).
Latency models: iid lognormal sigma 0.5 on each side; per-request structure (a request's
own cost, lognormal sigma 0.45, shared by both sides, times each side's noise, sigma 0.2).

    python bench/gate_p99_pairs.py [--runs 40] [--max-pairs 12000]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from proxy.gate.sequential import quantile_ranks

LIMIT = 1.25
ALPHA = 0.05
GRID = 1.02
BETS = 0.9 * 2.0 ** (-np.arange(14) / 2)
EDGES = np.exp(np.arange(math.log(1e-3), math.log(1e3), math.log(GRID)))

Judge = Callable[[NDArray[np.float64], NDArray[np.float64]], bool]


def two_bounds(old: NDArray[np.float64], new: NDArray[np.float64]) -> bool:
    n = len(old)
    low, high = quantile_ranks(n, 0.99, ALPHA / 2)
    if low < 1 or high >= n:
        return False
    return bool(np.sort(new)[high] <= LIMIT * np.sort(old)[low - 1])


def _log_wealth(up: NDArray[np.float64], down: NDArray[np.float64]) -> NDArray[np.float64]:
    terms = (math.log(1 / len(BETS)) + up[:, None] * np.log1p(-BETS)
             + down[:, None] * np.log1p(BETS))
    top = terms.max(axis=1)
    out: NDArray[np.float64] = top + np.log(np.exp(terms - top[:, None]).sum(axis=1))
    return out


def paired(old: NDArray[np.float64], new: NDArray[np.float64], alpha_1: float = ALPHA / 2
           ) -> bool:
    n = len(old)
    low, high = quantile_ranks(n, 0.99, alpha_1)
    if low < 1 or high >= n:
        return False
    ordered = np.sort(old)
    k0 = int(np.searchsorted(EDGES, ordered[low - 1], side="right")) - 1
    k1 = int(np.searchsorted(EDGES, ordered[high], side="right")) - 1
    a, b = EDGES[k0:k1 + 1, None], EDGES[k0 + 1:k1 + 2, None]
    up = ((new > LIMIT * a) & (old <= b)).sum(axis=1).astype(float)
    down = ((old > b) & (new <= LIMIT * a)).sum(axis=1).astype(float)
    return bool(np.all(_log_wealth(up, down) >= math.log(1 / (ALPHA - alpha_1))))


def _sample(rng: np.random.Generator, model: str, scale: float,
            n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    if model == "iid":
        return rng.lognormal(0, 0.5, n), scale * rng.lognormal(0, 0.5, n)
    cost = rng.lognormal(0, 0.45, n)
    return cost * rng.lognormal(0, 0.2, n), scale * cost * rng.lognormal(0, 0.2, n)


def _first_pass(judge: Judge, old: NDArray[np.float64], new: NDArray[np.float64],
                every: int) -> int | None:
    for n in range(every, len(old) + 1, every):
        if judge(old[:n], new[:n]):
            return n
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--max-pairs", type=int, default=12000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    print(f"{args.runs} runs a cell, a look every {args.every} pairs to {args.max_pairs}; "
          f"limit {LIMIT:g}, alpha {ALPHA:g}; the p99 check alone")
    print("| latency | new | check | passed | median pairs to a pass [quartiles] |")
    print("|---|---|---|---|---|")
    judges: dict[str, Judge] = {"two bounds (today)": two_bounds, "paired buckets": paired}
    for model in ("iid", "per-request"):
        for label, scale in (("identical", 1.0), ("at the limit", LIMIT)):
            rng = np.random.default_rng(args.seed)
            samples = [_sample(rng, model, scale, args.max_pairs) for _ in range(args.runs)]
            for name, judge in judges.items():
                ends = [_first_pass(judge, old, new, args.every) for old, new in samples]
                done = sorted(e for e in ends if e is not None)
                spread = (f"{statistics.median(done):,.0f} [{done[len(done) // 4]:,}.."
                          f"{done[(3 * len(done)) // 4]:,}]" if done else "-")
                print(f"| {model} | {label} | {name} | {len(done)}/{args.runs} | {spread} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
