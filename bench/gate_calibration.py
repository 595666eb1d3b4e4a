"""How often a cutover promotes, by simulation: the gate's error rates under its real look schedule.

Each cell is a true new version (a match-rate gap, a p50 body shift, a p99 tail-only
regression, an error-rate excess, an output-length shift, or none) and `--runs` simulated
cutovers of it: 5 requests/s, every one deterministic and streamed, mirrored to new and to
a baseline; the reconciler evaluates the gate once a second (`Reconciler` tick_s 1.0) from
`--analysis-delay` to `--analysis-timeout` (defaults 10 s / 1800 s), promotes at the first
pass and aborts after `failure_limit` (3) failing evaluations in a row. Both gates see the
same draws: the anytime-valid one (the gate's own `sequential` functions and default
criteria) and a copy of the rule before it (`_gate_rules.todays_gate`). The vectorized
verdicts are checked against `proxy.compare.gate.evaluate` over real `GateInputs` at each
run's last look for `--check-runs` runs per cell (mismatches are printed and counted).

    python bench/gate_calibration.py [--runs 1000] [--cells clean,p99] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _gate_rules import (
    FAIL,
    LATENCY,
    PASS,
    Look,
    mann_whitney_p,
    new_gate,
    new_rank_needs,
    todays_gate,
)
from _gate_sim import RankTrees, Series, draw, tail_factor_for, value_at

from proxy.compare.gate import GateCriteria, GateInputs, MatchCounts, evaluate
from proxy.compare.stats import LatencySamples

RATE_PER_S = 5
TTFT_S, TPOT_S, LENGTH = 0.2, 0.02, 200.0


@dataclass(frozen=True)
class Cell:
    name: str
    limit_case: bool  # at or beyond a limit: promotion must stay <= 5 %
    sigma: float = 0.15
    base_match: float = 0.98
    new_match: float = 0.98
    old_errors: float = 0.005
    new_errors: float = 0.005
    ttft: dict[str, float] = field(default_factory=dict)  # scale / tail_share / tail_factor
    tpot: dict[str, float] = field(default_factory=dict)
    length_scale: float = 1.0


def _length_scale(shift: float) -> float:
    """Lognormal(sigma 0.5) lengths scaled so that P(new > old) - P(new < old) = shift."""
    from statistics import NormalDist

    return math.exp(0.5 * math.sqrt(2) * NormalDist().inv_cdf((1 + shift) / 2))


def cells() -> list[Cell]:
    out = [Cell("clean, sigma 0.15", False), Cell("clean, sigma 0.5", False, sigma=0.5)]
    for gap, at in ((0.02, False), (0.05, True), (0.08, True)):
        out.append(Cell(f"match gap {gap:.2f} (limit 0.05)", at, new_match=0.98 - gap))
    for ratio, at in ((0.95, False), (1.03, False), (1.05, False), (1.08, False),
                      (1.10, True), (1.25, True)):
        out.append(Cell(f"TTFT body x{ratio:.2f} (p50 limit 1.10)", at, sigma=0.5,
                        ttft={"scale": ratio}))
    for ratio, at in ((1.05, False), (1.10, True)):
        out.append(Cell(f"TPOT body x{ratio:.2f} (p50 limit 1.10)", at, sigma=0.5,
                        tpot={"scale": ratio}))
    limit = GateCriteria().max_ttft_p99_ratio or 1.25
    for sigma, ratio, at in ((0.5, 1.15, False), (0.5, limit, True), (0.5, 2.0, True),
                             (0.15, limit, True)):
        out.append(Cell(f"TTFT p99 tail x{ratio:.2f}, sigma {sigma} (limit {limit:g})", at,
                        sigma=sigma, ttft={"tail_share": 0.03,
                                           "tail_factor": tail_factor_for(sigma, ratio)}))
    out.append(Cell(f"TPOT p99 tail x{limit:.2f}, sigma 0.5 (limit {limit:g})", True,
                    sigma=0.5, tpot={"tail_share": 0.03,
                                     "tail_factor": tail_factor_for(0.5, limit)}))
    for excess, at in ((0.0025, False), (0.01, True), (0.03, True)):
        out.append(Cell(f"errors +{excess:.4f} (limit +0.01)", at, new_errors=0.005 + excess))
    for shift, at in ((0.1, False), (0.3, True), (0.5, True)):
        out.append(Cell(f"length shift {shift:+.1f} (limit 0.3)", at,
                        length_scale=_length_scale(shift)))
    return out


@dataclass
class Outcome:
    decided_at: np.ndarray  # look index of promotion or abort, -1: timeout
    promoted: np.ndarray
    aborted: np.ndarray

    @classmethod
    def empty(cls, runs: int) -> Outcome:
        return cls(np.full(runs, -1), np.zeros(runs, bool), np.zeros(runs, bool))


def simulate(cell: Cell, runs: int, looks: int, failure_limit: int, seed: int,
             check_runs: int, criteria: GateCriteria) -> tuple[Outcome, Outcome, int]:
    rng = np.random.default_rng(seed)
    size = looks * RATE_PER_S
    new_match = np.cumsum(rng.random((runs, size)) < cell.new_match, axis=1)
    base_match = np.cumsum(rng.random((runs, size)) < cell.base_match, axis=1)
    new_err = np.cumsum(rng.random((runs, size)) < cell.new_errors, axis=1)
    old_err = np.cumsum(rng.random((runs, size)) < cell.old_errors, axis=1)
    series: dict[tuple[str, str], Series] = {}
    for metric, scale, extra in (("ttft", TTFT_S, cell.ttft), ("tpot", TPOT_S, cell.tpot)):
        series[(metric, "old")] = draw(rng, runs, size, cell.sigma, scale)
        series[(metric, "new")] = draw(rng, runs, size, cell.sigma, scale * extra.get("scale", 1),
                                       extra.get("tail_share", 0.0),
                                       extra.get("tail_factor", 1.0))
    series[("lengths", "old")] = draw(rng, runs, size, 0.5, LENGTH)
    series[("lengths", "new")] = draw(rng, runs, size, 0.5, LENGTH * cell.length_scale)
    signs = np.cumsum(np.sign(series[("lengths", "new")].arrived(size)
                              - series[("lengths", "old")].arrived(size)), axis=1)
    order = list(series)
    trees = RankTrees(len(order), runs, size)
    flat = {key: (np.log(s.by_rank) + 100 * np.arange(runs)[:, None]).ravel()
            for key, s in series.items()}
    u_stat = {m: np.zeros(runs) for m in ("ttft", "tpot", "lengths")}
    needs = new_rank_needs(criteria, size)
    results = {"new": Outcome.empty(runs), "today": Outcome.empty(runs)}
    streaks = {k: np.zeros(runs, int) for k in results}
    last_look: dict[str, Look] = {}
    for look_index in range(looks):
        lo, n = look_index * RATE_PER_S, (look_index + 1) * RATE_PER_S
        # today's rule decided everywhere: its Mann-Whitney statistics are not needed
        mw = bool((results["today"].decided_at < 0).any())
        _add_arrivals(series, trees, order, flat, u_stat, lo, n, runs, size, mw)
        look = _look(series, trees, order, needs, u_stat, n, new_match, base_match, new_err,
                     old_err, signs, mw)
        for name, rule in (("new", new_gate), ("today", todays_gate)):
            out = results[name]
            if name == "today" and not mw:
                continue
            open_runs = out.decided_at < 0
            verdict = rule(look, criteria)
            streaks[name] = np.where(verdict == FAIL, streaks[name] + 1, 0)
            promote = open_runs & (verdict == PASS)
            abort = open_runs & (streaks[name] >= failure_limit)
            out.promoted |= promote
            out.aborted |= abort
            out.decided_at = np.where(promote | abort, look_index, out.decided_at)
        last_look["look"] = look
        if all((o.decided_at >= 0).all() for o in results.values()):
            break
    mismatches = _cross_check(series, results["new"], new_match, base_match, new_err,
                              old_err, look_index, check_runs, criteria)
    return results["new"], results["today"], mismatches


def _add_arrivals(series, trees, order, flat, u_stat, lo, n, runs, size,
                  mw: bool) -> None:
    """Insert arrivals lo..n of every series; update Mann-Whitney U (new > old pairs):
    old's arrivals against new's earlier ones, then new's against old's, this look's too."""
    offsets = np.arange(runs)[:, None] * size
    metrics = ("ttft", "tpot", "lengths") if mw else ("ttft", "tpot")
    sides: tuple[tuple[str, str, Literal["left", "right"]], ...] = (
        ("old", "new", "right"), ("new", "old", "left"))
    for first, other, side in sides:
        if not mw:
            firsts = np.array([order.index((m, first)) for m in metrics])
            for j in range(lo, n):
                trees.insert(firsts, np.stack([series[(m, first)].arrival[:, j]
                                               for m in metrics]))
            continue
        rows, positions = [], []
        for metric in metrics:
            arriving = series[(metric, first)]
            x = np.log(np.take_along_axis(arriving.by_rank, arriving.arrival[:, lo:n], axis=1))
            key = (x + 100 * np.arange(runs)[:, None]).ravel()
            pos = np.searchsorted(flat[(metric, other)], key, side=side).reshape(x.shape)
            rows += [order.index((metric, other))] * (n - lo)
            positions.append((pos - offsets).T)
        below = trees.below(np.array(rows), np.concatenate(positions))
        for k, metric in enumerate(metrics):
            part = below[k * (n - lo):(k + 1) * (n - lo)]
            # old arriving: new pairs above it (new > old); new arriving: old below it
            u_stat[metric] += (lo - part).sum(axis=0) if first == "old" else part.sum(axis=0)
        firsts = np.array([order.index((m, first)) for m in metrics])
        for j in range(lo, n):
            trees.insert(firsts, np.stack([series[(m, first)].arrival[:, j] for m in metrics]))


def _look(series, trees, order, needs, u_stat, n, new_match, base_match, new_err, old_err,
          signs, today: bool) -> Look:
    queries: list[tuple[tuple[str, float, str, str], str, int]] = []
    bounds, points = {}, {}
    for metric, q, _field in LATENCY:
        pos = (n - 1) * q
        floor = math.floor(pos)
        for role in ("old", "new"):
            for side in ("pass", "fail"):
                low_count, high_count = (int(needs[(q, side)][0][n]),
                                         int(needs[(q, side)][1][n]))
                key = (metric, q, role, side)
                queries += [(key, "low", low_count), (key, "high", high_count + 1)]
            if today:  # the rule before: numpy-interpolated percentiles
                key = (metric, q, role, "point")
                queries += [(key, "p0", floor + 1), (key, "p1", min(floor + 2, n))]
    rows = np.array([order.index((k[0], k[2])) for k, _w, _c in queries])
    ks = np.array([[c if 1 <= c <= n else 0] for _k, _w, c in queries])
    ranks = trees.kth(rows, np.broadcast_to(ks, (len(queries), len(trees.runs))))
    got: dict[tuple[tuple[str, float, str, str], str], np.ndarray] = {}
    for i, (key, what, _c) in enumerate(queries):
        got[(key, what)] = value_at(series[(key[0], key[2])], ranks[i])
    for metric, q, _field in LATENCY:
        frac = (n - 1) * q - math.floor((n - 1) * q)
        for role in ("old", "new"):
            for side in ("pass", "fail"):
                key = (metric, q, role, side)
                bounds[key] = (got[(key, "low")], got[(key, "high")])
            if today:
                key = (metric, q, role, "point")
                points[(metric, q, role)] = got[(key, "p0")] + (got[(key, "p1")]
                                                                - got[(key, "p0")]) * frac
    mw = {} if not today else {"ttft": mann_whitney_p(u_stat["ttft"], n, False),
          "tpot": mann_whitney_p(u_stat["tpot"], n, False),
          "lengths": mann_whitney_p(u_stat["lengths"], n, True)}
    return Look(n, new_match[:, n - 1].astype(float), base_match[:, n - 1].astype(float),
                new_err[:, n - 1].astype(float), old_err[:, n - 1].astype(float),
                signs[:, n - 1].astype(float), bounds, points, mw)


def _cross_check(series, outcome, new_match, base_match, new_err, old_err, last,
                 check_runs, criteria) -> int:
    """`gate.evaluate` over real GateInputs at each checked run's deciding (or last) look."""
    mismatches = 0
    for run in range(min(check_runs, len(outcome.decided_at))):
        at = outcome.decided_at[run] if outcome.decided_at[run] >= 0 else last
        n = (at + 1) * RATE_PER_S
        inputs = GateInputs(
            new_vs_old=MatchCounts(n, n - int(new_match[run, n - 1])),
            baseline_vs_old=MatchCounts(n, n - int(base_match[run, n - 1])),
            latency={"primary": _samples(series, "old", n, run),
                     "shadow": _samples(series, "new", n, run)},
            requests={"primary": n, "shadow": n},
            errors={"primary": int(old_err[run, n - 1]), "shadow": int(new_err[run, n - 1])})
        verdict = evaluate(inputs, criteria).verdict
        expected = ("pass" if outcome.promoted[run] else "fail" if outcome.aborted[run]
                    else "inconclusive")
        if verdict != expected and not (expected == "inconclusive" and verdict != "pass"):
            mismatches += 1
            print(f"  MISMATCH run {run} look {at}: evaluate {verdict}, bench {expected}")
    return mismatches


def _samples(series: dict[tuple[str, str], Series], role: str, n: int,
             run: int) -> LatencySamples:
    return LatencySamples(
        ttft_s=tuple(series[("ttft", role)].arrived(n)[run].tolist()),
        tpot_s=tuple(series[("tpot", role)].arrived(n)[run].tolist()),
        output_tokens=tuple(series[("lengths", role)].arrived(n)[run].tolist()))


def _rate(hits: np.ndarray) -> str:
    from proxy.compare.stats import wilson_interval

    k, n = int(hits.sum()), len(hits)
    low, high = wilson_interval(k, n, 0.95)
    return f"{k / n:6.1%} [{low:5.1%}, {high:5.1%}]"


def _median(outcome: Outcome) -> str:
    decided = outcome.decided_at[outcome.decided_at >= 0]
    return "-" if not len(decided) else f"{int(np.median(decided) + 1) * RATE_PER_S}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--analysis-timeout", type=float, default=1800.0)
    parser.add_argument("--analysis-delay", type=float, default=10.0)
    parser.add_argument("--failure-limit", type=int, default=3)
    parser.add_argument("--cells", default="", help="name fragments, separated by ;")
    parser.add_argument("--only", default=None, metavar="A:B",
                        help="only cells A..B-1 (0-based): runs split into shorter pieces")
    parser.add_argument("--check-runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--smoke", action="store_true", help="20 runs, 120 s, 3 cells")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.analysis_timeout = 20, 130.0
        args.cells = args.cells or "clean, sigma 0.15;match gap 0.08;errors +0.0300"
    looks = int(args.analysis_timeout - args.analysis_delay)
    criteria = GateCriteria()
    wanted = [w for w in args.cells.split(";") if w]
    chosen = [c for c in cells() if not wanted or any(w in c.name for w in wanted)]
    first = 0
    if args.only is not None:
        first, _, last = args.only.partition(":")
        first = int(first)
        chosen = chosen[first:int(last) if last else first + 1]
    print(f"{args.runs} runs a cell, {RATE_PER_S} requests/s, a look a second for {looks} s, "
          f"failure limit {args.failure_limit}; promoted / aborted with 95 % Wilson intervals; "
          "median samples (a role) to the decision")
    print("| cell | limit? | new: promoted | new: aborted | new: median n | "
          "today: promoted | today: aborted | today: median n |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    worst, mismatches, started = (0.0, ""), 0, time.monotonic()
    for i, cell in enumerate(chosen):
        new, today, bad = simulate(cell, args.runs, looks, args.failure_limit,
                                   args.seed + first + i, args.check_runs, criteria)
        mismatches += bad
        print(f"| {cell.name} | {'yes' if cell.limit_case else 'no'} | {_rate(new.promoted)} | "
              f"{_rate(new.aborted)} | {_median(new)} | {_rate(today.promoted)} | "
              f"{_rate(today.aborted)} | {_median(today)} |", flush=True)
        if cell.limit_case and new.promoted.mean() >= worst[0]:
            worst = (float(new.promoted.mean()), cell.name)
    print(f"worst limit cell (new gate): {worst[1]!r} promoted {worst[0]:.1%}; "
          f"{mismatches} mismatches with gate.evaluate; {time.monotonic() - started:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
