"""The p99 check on pairs against the same check on two quantile bounds (docs/GATE.md).

Both through the product's code: `proxy.gate.latency_checks.latency_checks` over real
`GateInputs`, the p99 check alone (TTFT p99, limit 1.25, its 5 ms floor, every other
limit off), looked at every `--every` pairs. "two bounds": the inputs carry each side's
samples only (new's upper bound within the allowance over old's lower bound, each a
confidence sequence at half the pass alpha: what a source without pairs gets, such as
Prometheus). "paired": the same inputs plus every (old, new) pair in joint 1 % buckets
(`GateInputs.pair_tails`), which the store and in-memory records give.

Latency models (old around 0.2 s): iid lognormal sigma 0.5 on each side; per request, a
cost shared by both sides (lognormal sigma 0.45) times each side's own noise (sigma 0.2).
New: identical; 5 % slower on every request (within the limit); scaled by the limit
(its p99 exactly at it: how often each passes it); 1.6x on the requests in the top 5 % of
cost (p99 1.6x: how soon each aborts).

    python bench/gate_p99_pairs.py [--runs 40] [--max-pairs 12000] [--every 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
from numpy.typing import NDArray

from proxy.gate.criteria import GateCriteria
from proxy.gate.latency_checks import latency_checks
from proxy.gate.sketch import LogHistogram, PairHistogram
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import GateInputs, MatchCounts

LIMIT = 1.25
CRITERIA = GateCriteria(max_ttft_p50_ratio=None, max_tpot_p50_ratio=None,
                        max_tpot_p99_ratio=None, max_e2e_unstreamed_p50_ratio=None,
                        max_tpot_unstreamed_p50_ratio=None,
                        max_tpot_unstreamed_p99_ratio=None)
CELLS = {"identical": (1.0, 1.0), "5 % slower": (1.05, 1.0), "at the limit": (LIMIT, 1.0),
         "tail 1.6x": (1.0, 1.6)}
Array = NDArray[np.float64]


def _sample(rng: np.random.Generator, model: str, cell: str, n: int) -> tuple[Array, Array]:
    scale, tail = CELLS[cell]
    if model == "iid":
        cost = rng.lognormal(0, 0.5, n)
        old, new = 0.2 * cost, 0.2 * rng.lognormal(0, 0.5, n)
        top = new > 0.2 * np.exp(0.5 * 1.645)
    else:
        cost = rng.lognormal(0, 0.45, n)
        old = 0.2 * cost * rng.lognormal(0, 0.2, n)
        new = 0.2 * cost * rng.lognormal(0, 0.2, n)
        top = cost > np.exp(0.45 * 1.645)
    return old, np.where(top, new * tail, new) * scale


def _first_verdict(old: Array, new: Array, every: int, paired: bool) -> tuple[str, int]:
    """Grows the sketches as the store does and judges at every look."""
    tails = {"baseline": {"ttft": LogHistogram()}, "shadow": {"ttft": LogHistogram()}}
    pairs = PairHistogram()
    for end in range(every, len(old) + 1, every):
        chunk_old, chunk_new = old[end - every:end].tolist(), new[end - every:end].tolist()
        tails["baseline"]["ttft"].add(chunk_old)
        tails["shadow"]["ttft"].add(chunk_new)
        for x, y in zip(chunk_old, chunk_new):
            pairs.add(x, y)
        # the quantiles read the sketches; the latency window only says which roles timed
        window_old, window_new = tuple(chunk_old), tuple(chunk_new)
        inputs = GateInputs(
            new_vs_old=MatchCounts(end, 0), baseline_vs_old=None,
            latency={"primary": LatencySamples(ttft_s=window_old),
                     "baseline": LatencySamples(ttft_s=window_old),
                     "shadow": LatencySamples(ttft_s=window_new)},
            requests={"primary": end, "shadow": end, "baseline": end}, errors={},
            tails=tails, pair_tails={"ttft": pairs} if paired else {})
        facts = latency_checks(inputs, CRITERIA)
        assert facts is not None
        status = facts.ratios["max_ttft_p99_ratio"].status
        if status != "inconclusive":
            return status, end
    return "inconclusive", len(old)


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    done = sorted(values)
    return (f"{statistics.median(done):,.0f} [{done[len(done) // 4]:,}.."
            f"{done[(3 * len(done)) // 4]:,}]")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40, help="runs a cell (default 40)")
    p.add_argument("--max-pairs", type=int, default=12000,
                   help="pairs a run at most (default 12000)")
    p.add_argument("--every", type=int, default=100,
                   help="pairs between looks (default 100)")
    p.add_argument("--seed", type=int, default=1)
    names = ", ".join(CELLS).replace("%", "%%")  # argparse formats help with %
    p.add_argument("--cells", default=",".join(CELLS),
                   help=f"comma-separated, of: {names} (default: all)")
    args = p.parse_args(argv)
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        p.error(f"unknown cell(s) {unknown}; choose from {list(CELLS)}")
    print(f"{args.runs} runs a cell, a look every {args.every} pairs to {args.max_pairs}; "
          f"TTFT p99 limit {LIMIT:g}, confidence {CRITERIA.confidence:g}; the p99 check alone")
    print("| latency | new | check | passed | failed | median pairs to a pass [quartiles] "
          "| median pairs to a fail |")
    print("|---|---|---|---|---|---|---|")
    for model in ("iid", "per-request"):
        for cell in cells:
            rng = np.random.default_rng(args.seed)
            samples = [_sample(rng, model, cell, args.max_pairs) for _ in range(args.runs)]
            for name, paired in (("two bounds", False), ("paired", True)):
                ends = [_first_verdict(old, new, args.every, paired) for old, new in samples]
                passes = [n for status, n in ends if status == "pass"]
                fails = [n for status, n in ends if status == "fail"]
                print(f"| {model} | {cell} | {name} | {len(passes)}/{args.runs} | "
                      f"{len(fails)}/{args.runs} | {_spread(passes)} | {_spread(fails)} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
