"""The gate's cost: how often a cutover promotes, aborts or times out, how many requests a
decision takes, and what a test planned for a fixed horizon would need for the same effect.

Each cell is one true new version and `--runs` simulated cutovers of it, looked at on the
reconciler's schedule: 5 requests/s mirrored to new (shadow) and to a baseline (a second
old copy), every request deterministic, the gate evaluated once a second from the 10 s
analysis delay to the 1800 s analysis timeout (`CutoverSpec` defaults, 8,950 requests a
side), promotion at the first pass, an abort after `failure_limit` (3) failing
evaluations in a row. The verdict at each look is the current gate at its default
`GateCriteria`, vectorized over runs (`_gate_rules.gate_verdict`: the gate's own
`sequential` bounds, windows and bucketed tails); on `--check-runs` runs per cell the
vectorized verdict is compared with `proxy.gate.verdict.evaluate` over `GateInputs` built
by `GateInputs.from_records` from the same requests as `ExchangeRecord`s, at the deciding
look, the look before it and one in between (mismatches are printed and counted).

For clean cells, the fixed-horizon price: at every look on a grid (5 % apart) the one-look
test planned for that sample size (`_gate_rules.fixed_pass`: the same checks with exact
bounds at the pass side's alpha) is applied to the same draws; the smallest n at which it
passes in 50 % / 80 % of runs is set against the n by which the sequential gate has
promoted 50 % / 80 % of runs.

    python bench/gate_calibration.py [--runs 1000] [--cells 'identical;x1.10'] [--only A:B]
        [--json table.json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _gate_rules import (
    FAIL,
    PASS,
    Look,
    fixed_pass,
    gate_verdict,
)
from _gate_sim import (
    Model,
    RankTrees,
    Series,
    Traffic,
    bucket_edges,
    draw_traffic,
    pair_buckets,
)

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.compare.types import Outcome as CompareOutcome
from proxy.cutover.spec import CutoverSpec
from proxy.gate.latency_checks import allowance
from proxy.gate.sequential import quantile_rank_table
from proxy.gate.sketch import last_edge_below, pair_edges
from proxy.gate.stats import wilson_interval
from proxy.gate.tally import LATENCY_WINDOW
from proxy.gate.verdict import GateCriteria, GateInputs, evaluate

RATE_PER_S = 5
METRICS = ("ttft", "tpot", "e2e_unstreamed", "tpot_unstreamed")
CAPTURED: tuple[Role, ...] = ("primary", "baseline", "shadow")
Kind = Literal["clean", "limit"]


@dataclass(frozen=True)
class Cell:
    name: str
    kind: Kind  # limit: at or beyond a default limit, promotion must stay <= 5 %
    model: Model = field(default_factory=Model)


def _iid(sigma: float, **kw: Any) -> Model:
    return Model(noise=sigma * math.sqrt(2), **kw)


def _per_request(noise: float = 0.2, **kw: Any) -> Model:
    """Prompt and answer lengths drive most latency: a request's own TTFT cost has sigma
    0.5 and its TPOT 0.3, shared by both sides; engine noise `noise` on the log ratio."""
    return Model(shared_ttft=0.5, shared_tpot=0.3, noise=noise, **kw)


def cells() -> list[Cell]:
    out = [Cell("identical, iid sigma 0.15", "clean", _iid(0.15)),
           Cell("identical, iid sigma 0.5", "clean", _iid(0.5)),
           Cell("identical, per-request noise 0.1", "clean", _per_request(0.1)),
           Cell("identical, per-request noise 0.2", "clean", _per_request(0.2)),
           # the default traffic (2 % divergence a side, no errors): what binds
           # where the error check has nothing to outweigh
           Cell("identical, per-request noise 0.1, no errors", "clean",
                _per_request(0.1, old_errors=0.0, new_errors=0.0)),
           Cell("identical, per-request noise 0.2, no errors", "clean",
                _per_request(0.2, old_errors=0.0, new_errors=0.0)),
           Cell("identical, unstreamed only", "clean", _per_request(streamed=0.0)),
           Cell("identical, mixed (half streamed)", "clean", _per_request(streamed=0.5))]
    for scale in (0.95, 1.03, 1.05, 1.08, 1.10, 1.20):
        out.append(Cell(f"TTFT and TPOT x{scale:.2f} (p50 limit 1.10)",
                        "limit" if scale >= 1.10 else "clean", _per_request(scale=scale)))
    out += [Cell("TTFT and TPOT x1.05, noise 0.1", "clean", _per_request(0.1, scale=1.05)),
            Cell("TTFT and TPOT x1.10, noise 0.1", "limit", _per_request(0.1, scale=1.10)),
            Cell("TTFT and TPOT x1.05, iid sigma 0.5", "clean", _iid(0.5, scale=1.05)),
            Cell("TTFT and TPOT x1.10, iid sigma 0.5", "limit", _iid(0.5, scale=1.10))]
    for metric in ("TTFT", "TPOT"):
        key = f"{metric.lower()}_tail"
        for ratio in (1.15, 1.25):
            out.append(Cell(f"{metric} p99 x{ratio:.2f} (limit 1.25)",
                            "limit" if ratio >= 1.25 else "clean",
                            _per_request(**{key: ratio})))
    out += [Cell("TTFT p99 x1.50 (limit 1.25)", "limit", _per_request(ttft_tail=1.5)),
            Cell("TTFT p99 x1.25, iid sigma 0.15", "limit", _iid(0.15, ttft_tail=1.25)),
            Cell("unstreamed, E2E and per-token x1.10 (p50 limit 1.10)", "limit",
                 _per_request(streamed=0.0, scale=1.10)),
            Cell("unstreamed, per-token p99 about x1.29 (limit 1.25)", "limit",
                 _per_request(streamed=0.0, tpot_tail=1.3))]
    excesses: tuple[tuple[float, Kind], ...] = ((0.0025, "clean"), (0.01, "limit"),
                                               (0.03, "limit"))
    for excess, kind in excesses:
        out.append(Cell(f"errors +{excess:.4f} (limit +0.01)", kind,
                        _per_request(new_errors=0.005 + excess)))
    shifts: tuple[tuple[float, Kind], ...] = ((0.1, "clean"), (0.3, "limit"), (0.5, "limit"))
    for shift, kind in shifts:
        out.append(Cell(f"length shift {shift:+.1f} (limit 0.3)", kind,
                        _per_request(length_shift=shift, paired_lengths=False)))
    gaps: tuple[tuple[float, Kind], ...] = ((0.02, "clean"), (0.05, "limit"), (0.08, "limit"))
    for gap, kind in gaps:
        out.append(Cell(f"match gap {gap:.2f} (limit 0.05)", kind,
                        _per_request(new_divergence=0.02 + gap)))
    return out


def _prefix(x: np.ndarray) -> np.ndarray:
    """Counts of the first n requests at column n."""
    out = np.zeros((x.shape[0], x.shape[1] + 1), dtype=np.int64)
    np.cumsum(x, axis=1, out=out[:, 1:])
    return out


@dataclass
class Batch:
    """Runs of one cell drawn at once, and the prefix sums every look reads."""

    traffic: Traffic
    criteria: GateCriteria
    counts: dict[str, np.ndarray] = field(default_factory=dict)
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    tail_n: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    series: dict[tuple[str, str], tuple[int, Series]] = field(default_factory=dict)
    trees: RankTrees | None = None
    # p99 metric -> each request's pair: (counted, new's 1 % bucket, old's allowance's
    # last edge below: `latency_checks.TailCounts`), as columns of the counts below
    tail_pairs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = \
        field(default_factory=dict)
    # p99 metric -> per run and column, grown look by look: pairs with new's bucket there,
    # with old's edge there, and the difference arrays of gain and loss
    tail_grown: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)
    pairs_n: dict[str, np.ndarray] = field(default_factory=dict)
    _tail_cache: dict[tuple[str, int], tuple[np.ndarray, ...]] = field(default_factory=dict)
    _grown: int = 0

    @classmethod
    def of(cls, traffic: Traffic, criteria: GateCriteria, size: int) -> Batch:
        b = cls(traffic, criteria)
        t = traffic
        both = t.ok["primary"] & t.ok["shadow"]
        base = t.ok["primary"] & t.ok["baseline"]
        b.counts = {"compared": _prefix(both), "diverged": _prefix(both & t.diverged_new),
                    "base_compared": _prefix(base),
                    "base_diverged": _prefix(base & t.diverged_base),
                    "ok_new": _prefix(t.ok["shadow"]), "ok_old": _prefix(t.ok["primary"]),
                    "new_only": _prefix(t.ok["primary"] & ~t.ok["shadow"]),
                    "old_only": _prefix(t.ok["shadow"] & ~t.ok["primary"]),
                    "length_pairs": _prefix(both),
                    "length_signs": _prefix(both * np.sign(t.tokens["shadow"]
                                                           - t.tokens["primary"]))}
        limits = {e.metric: limit for e, limit in criteria.enabled_limits()
                  if e.quantile == 0.5}
        floors = {m: criteria.token_latency_floor_s if m.startswith("tpot")
                  else criteria.latency_floor_s for m in METRICS}
        p99 = {e.metric: limit for e, limit in criteria.enabled_limits()
               if e.quantile == 0.99}
        index = 0
        for metric in METRICS:
            old, old_ok = t.metric("baseline", metric)
            new, new_ok = t.metric("shadow", metric)
            paired = old_ok & new_ok
            limit = limits.get(metric, math.inf)
            slower = paired & (new > np.maximum(limit * old, old + floors[metric]))
            b.pairs[metric] = (_prefix(paired), _prefix(slower))
            b.tail_n[metric] = (_prefix(old_ok), _prefix(new_ok))
            if metric in p99 and (old_ok.any() or new_ok.any()):
                for role, values, ok in (("old", old, old_ok), ("new", new, new_ok)):
                    b.series[(metric, role)] = (index, Series.of(values, ok))
                    index += 1
                bucket = pair_buckets(new)
                top = last_edge_below(allowance(p99[metric], floors[metric],
                                                pair_edges(pair_buckets(old))))
                start = int(min(bucket.min(), top.min() - 1)) - 1
                width = int(max(bucket.max(), top.max())) + 3 - start
                b.tail_pairs[metric] = (paired, bucket - start, top - start)
                b.tail_grown[metric] = tuple(np.zeros((len(both), width), np.int32)
                                             for _ in range(4))
            b.pairs_n[metric] = _prefix(paired)
        b.trees = RankTrees(max(index, 1), len(both), size)
        return b

    def grow(self, lo: int, n: int) -> None:
        assert self.trees is not None
        for index, s in self.series.values():
            for j in range(lo, n):
                self.trees.insert(index, s.rank[:, j], s.counts[:, j])
        for metric, (paired, bucket, top) in self.tail_pairs.items():
            new_at, top_at, gain, loss = self.tail_grown[metric]
            for j in range(lo, n):  # gain on [bucket + 1, top - 1], loss on [top, bucket]
                runs = np.flatnonzero(paired[:, j])
                b, t = bucket[runs, j], top[runs, j]
                np.add.at(new_at, (runs, b), 1)
                np.add.at(top_at, (runs, t), 1)
                g, lose = b + 1 <= t - 1, t <= b
                np.add.at(gain, (runs[g], b[g] + 1), 1)
                np.add.at(gain, (runs[g], t[g]), -1)
                np.add.at(loss, (runs[lose], t[lose]), 1)
                np.add.at(loss, (runs[lose], b[lose] + 1), -1)
        self._grown = n

    def tail_counts(self, metric: str) -> tuple[np.ndarray, ...]:
        """(new_over, old_over, gain, loss) per run and column (`latency_checks.TailCounts`)."""
        key = (metric, self._grown)
        if key not in self._tail_cache:
            if any(n != self._grown for _, n in self._tail_cache):
                self._tail_cache.clear()
            if metric not in self.tail_pairs:
                empty = np.zeros((len(self.traffic.streamed), 1), np.int64)
                return empty, empty, empty, empty
            new_at, top_at, gain, loss = self.tail_grown[metric]
            new_over = np.cumsum(new_at[:, ::-1], axis=1)[:, ::-1]
            top_over = np.cumsum(top_at[:, ::-1], axis=1)[:, ::-1]
            old_over = np.zeros_like(top_over)
            old_over[:, :-1] = top_over[:, 1:]  # top >= k + 1
            self._tail_cache[key] = (new_over, old_over, np.cumsum(gain, axis=1),
                                     np.cumsum(loss, axis=1))
        return self._tail_cache[key]

    def order_stat(self, metric: str, role: str,
                   k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self.trees is not None
        if (metric, role) not in self.series:  # no samples of this kind in any run
            nan = np.full(k.shape, np.nan)
            return nan, nan, nan
        index, s = self.series[(metric, role)]
        rank = self.trees.kth(index, k)
        value = np.take_along_axis(s.by_rank, np.maximum(rank, 0)[:, None], axis=1)[:, 0]
        value = np.where(rank >= 0, value, np.nan)
        low, high = bucket_edges(value)
        return low, high, value

    def look(self, n: int) -> Look:
        c = {k: v[:, n].astype(float) for k, v in self.counts.items()}
        lo = max(0, n - LATENCY_WINDOW)

        def window(v: np.ndarray) -> np.ndarray:
            return (v[:, n] - v[:, lo]).astype(float)

        return Look(n, c["compared"], c["diverged"], c["base_compared"], c["base_diverged"],
                    n - c["ok_new"], n - c["ok_old"], c["new_only"], c["old_only"],
                    window(self.counts["length_pairs"]), window(self.counts["length_signs"]),
                    {m: (window(p), window(s)) for m, (p, s) in self.pairs.items()},
                    {m: (o[:, n].astype(float), w[:, n].astype(float))
                     for m, (o, w) in self.tail_n.items()},
                    self.order_stat,
                    {m: v[:, n].astype(float) for m, v in self.pairs_n.items()},
                    self.tail_counts)


@dataclass
class Outcome:
    """Per run: requests a side at the decision (-1: timed out), promoted, aborted."""

    decided_n: list[int] = field(default_factory=list)
    promoted: list[bool] = field(default_factory=list)
    aborted: list[bool] = field(default_factory=list)
    fixed_share: dict[int, list[float]] = field(default_factory=dict)  # n -> shares
    binding: dict[str, int] = field(default_factory=dict)  # check -> promotions it held last
    passing_since: dict[str, list[int]] = field(default_factory=dict)  # at each promotion
    mismatches: int = 0
    checked: int = 0


def grid(first: int, last: int) -> list[int]:
    out: list[int] = []
    n = float(first)
    while n <= last:
        value = RATE_PER_S * round(n / RATE_PER_S)
        if not out or value > out[-1]:
            out.append(value)
        n *= 1.05
    return out


def simulate(cell: Cell, runs: int, seed: int, args: argparse.Namespace,
             criteria: GateCriteria, out: Outcome, check_runs: int) -> None:
    looks = int(args.analysis_timeout - args.analysis_delay)
    size = looks * RATE_PER_S
    rng = np.random.default_rng(seed)
    traffic = draw_traffic(rng, runs, size, cell.model)
    batch = Batch.of(traffic, criteria, size)
    pa, fa = criteria.pass_alpha(), criteria.fail_alpha()
    ranks = {a: quantile_rank_table(size, 0.99, a) for a in (pa / 2, fa / 2)}
    fixed_at = set(grid(criteria.min_samples, size)) if cell.kind == "clean" else set()
    decided = np.full(runs, -1)
    promoted = np.zeros(runs, bool)
    aborted = np.zeros(runs, bool)
    streak = np.zeros(runs, int)
    history = np.full((min(check_runs, runs), looks), -1)
    fixed_done = not fixed_at
    first_pass: dict[str, np.ndarray] = {}  # check -> n since which it has passed
    for look_index in range(looks):
        lo, n = look_index * RATE_PER_S, (look_index + 1) * RATE_PER_S
        batch.grow(lo, n)
        look = batch.look(n)
        verdict, by_check = gate_verdict(look, criteria, ranks)
        for name, st in by_check.items():
            held = first_pass.setdefault(name, np.full(runs, -1))
            held[:] = np.where(st == PASS, np.where(held < 0, n, held), -1)
        history[:, look_index] = verdict[:len(history)]
        open_runs = decided < 0
        streak = np.where(verdict == FAIL, streak + 1, 0)
        promote = open_runs & (verdict == PASS)
        abort = open_runs & ~promote & (streak >= args.failure_limit)
        promoted |= promote
        aborted |= abort
        decided = np.where(promote | abort, n, decided)
        if promote.any():  # the check that passed last held the promotion back
            names = list(first_pass)
            latest = np.argmax(np.stack([first_pass[k] for k in names]), axis=0)
            for k in names:
                out.passing_since.setdefault(k, []).extend(first_pass[k][promote].tolist())
            for held_last in latest[promote]:
                name = names[int(held_last)]
                out.binding[name] = out.binding.get(name, 0) + 1
        if n in fixed_at:
            share = float(fixed_pass(look, criteria).mean())
            out.fixed_share.setdefault(n, []).append(share)
            fixed_done = share >= 0.8
        if (decided >= 0).all() and fixed_done:
            break
    last = look_index
    for run in range(len(history)):
        at = int(decided[run]) // RATE_PER_S - 1 if decided[run] >= 0 else last
        for index in sorted({at, at - 1, at // 2} - {-1}):
            if index < 0:
                continue
            got = evaluate(GateInputs.from_records(records(traffic, run,
                                                           (index + 1) * RATE_PER_S)),
                           criteria)
            expected = ("fail", "inconclusive", "pass")[int(history[run, index])]
            out.checked += 1
            if got.verdict != expected:
                out.mismatches += 1
                print(f"  MISMATCH {cell.name!r} run {run} n {(index + 1) * RATE_PER_S}: "
                      f"evaluate {got.verdict}, bench {expected}; "
                      + "; ".join(got.reasons[:3]), flush=True)
    out.decided_n += decided.tolist()
    out.promoted += promoted.tolist()
    out.aborted += aborted.tolist()


def records(t: Traffic, run: int, n: int) -> list[ExchangeRecord]:
    """The first n requests of `run` as the exchange records the proxy stores."""
    e2e = {role: t.e2e(role)[run] for role in ("primary", "baseline", "shadow")}
    out = []
    for i in range(n):
        stream = bool(t.streamed[run, i])
        meta = RequestMeta("completions", stream, True, f"{i:064x}", 100, None)
        caps = []
        for role in CAPTURED:
            if not t.ok[role][run, i]:
                caps.append(Capture(role, role, 500, None, (), None, None, None, "", None,
                                    error="http_5xx"))
                continue
            total = float(e2e[role][i])
            caps.append(Capture(role, role, 200,
                                float(t.ttft[role][run, i]) if stream else total, (), total,
                                int(t.tokens[role][run, i]), "length", "", None))
        comparisons = []
        against: Role
        for against, diverged in (("shadow", t.diverged_new), ("baseline", t.diverged_base)):
            both = t.ok["primary"][run, i] and t.ok[against][run, i]
            outcome: CompareOutcome = ("error" if not both else "diverged" if diverged[run, i]
                                       else "match")
            comparisons.append(Comparison(against, outcome, outcome == "match",
                                          None, None, None, None, None))
        out.append(ExchangeRecord(f"r{i}", float(i), meta, tuple(caps), tuple(comparisons)))
    return out


def summary(cell: Cell, out: Outcome) -> dict[str, Any]:
    runs = len(out.promoted)
    decided = np.array(out.decided_n)
    promoted = np.array(out.promoted)
    aborted = np.array(out.aborted)
    timed_out = decided < 0

    def share(hits: np.ndarray) -> dict[str, float]:
        k = int(hits.sum())
        low, high = wilson_interval(k, runs, 0.95)
        return {"k": k, "rate": k / runs, "low": low, "high": high}

    to_promote = np.where(promoted, decided, np.inf)
    row: dict[str, Any] = {
        "cell": cell.name, "kind": cell.kind, "model": asdict(cell.model), "runs": runs,
        "promoted": share(promoted), "aborted": share(aborted), "timed_out": share(timed_out),
        "median_n_decided": float(np.median(decided[decided >= 0])) if (decided >= 0).any()
        else None,
        "seq_n50": _finite(np.quantile(to_promote, 0.5)),
        "seq_n80": _finite(np.quantile(to_promote, 0.8)),
        "binding": dict(sorted(out.binding.items(), key=lambda kv: -kv[1])),
        "check_n50": {k: float(np.median(v)) for k, v in out.passing_since.items()},
        "mismatches": out.mismatches, "checked": out.checked}
    if out.fixed_share:
        shares = {n: float(np.mean(v)) for n, v in sorted(out.fixed_share.items())}
        row["fixed_power"] = {str(n): s for n, s in shares.items()}
        for level in (50, 80):
            at = next((n for n, s in shares.items() if s >= level / 100), None)
            row[f"fixed_n{level}"] = at
            seq = row[f"seq_n{level}"]
            row[f"ratio{level}"] = (seq / at) if seq is not None and at else None
    return row


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _fmt_share(s: dict[str, float], upper: bool = False) -> str:
    text = f"{s['k']} ({s['rate']:.1%}, {s['low']:.1%}-{s['high']:.1%})"
    return f"**{s['k']}** (up to {s['high']:.1%})" if upper else text


def table_row(row: dict[str, Any]) -> str:
    def n(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}"

    def r(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    limit = row["kind"] == "limit"
    fixed = (f"{n(row.get('fixed_n50'))} / {n(row.get('fixed_n80'))}" if not limit else "-")
    ratio = (f"{r(row.get('ratio50'))} / {r(row.get('ratio80'))}" if not limit else "-")
    return (f"| {row['cell']} | {row['kind']} | {row['runs']} | "
            f"{_fmt_share(row['promoted'], upper=limit)} | {_fmt_share(row['aborted'])} | "
            f"{_fmt_share(row['timed_out'])} | {n(row['median_n_decided'])} | "
            f"{n(row['seq_n50'])} / {n(row['seq_n80'])} | {fixed} | {ratio} |")


HEADER = ("| cell | kind | runs | promoted (95 % Wilson) | aborted | timed out | median n "
          "to a decision | n by which 50 % / 80 % promoted | fixed horizon n at 50 % / 80 % "
          "power | ratio 50 % / 80 % |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- "
          "| --- |")


def main(argv: list[str] | None = None) -> int:
    spec = CutoverSpec
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--clean-runs", type=int, default=None,
                        help="runs for clean cells (default: --runs)")
    parser.add_argument("--batch", type=int, default=250, help="runs drawn at once")
    parser.add_argument("--analysis-timeout", type=float, default=spec.analysis_timeout_s)
    parser.add_argument("--analysis-delay", type=float, default=spec.analysis_delay_s)
    parser.add_argument("--failure-limit", type=int, default=spec.failure_limit)
    parser.add_argument("--cells", default="", help="name fragments, separated by ;")
    parser.add_argument("--kind", choices=("clean", "limit"), default=None,
                        help="only cells of this kind")
    parser.add_argument("--only", default=None, metavar="A:B", help="only cells A..B-1")
    parser.add_argument("--check-runs", type=int, default=3,
                        help="runs per cell checked against gate.evaluate")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--json", default=None, help="write the table here as cells finish; "
                        "cells already in it are skipped")
    parser.add_argument("--smoke", action="store_true", help="20 runs, 120 s, 3 cells")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the table of these runs' JSON files (cell order) and exit")
    parser.add_argument("--tournament", action="store_true",
                        help="the tournament cell instead: 4 candidates raced through the real "
                        "proxy.tune.race.Race, one beyond a limit (bench/tune_tournament.py; "
                        "--runs races, default 200)")
    args = parser.parse_args(argv)
    if args.tournament:
        from tune_tournament import main as tournament

        runs = args.runs if "--runs" in (argv if argv is not None else sys.argv) else 200
        return tournament(["--runs", str(runs), "--seed", str(args.seed)]
                          + (["--smoke"] if args.smoke else []))
    if args.table:
        rows = {r["cell"]: r for f in args.table for r in json.loads(Path(f).read_text())}
        print(HEADER)
        for cell in cells():
            if cell.name in rows:
                print(table_row(rows[cell.name]))
        return 0
    if args.smoke:
        args.runs, args.analysis_timeout, args.check_runs = 20, 130.0, 2
        args.cells = args.cells or ("identical, iid sigma 0.15;match gap 0.08;"
                                    "errors +0.0300")
    criteria = GateCriteria()
    wanted = [w for w in args.cells.split(";") if w]
    all_cells = cells()
    chosen = [(i, c) for i, c in enumerate(all_cells)
              if (not wanted or any(w in c.name for w in wanted))
              and args.kind in (None, c.kind)]
    if args.only is not None:
        a, _, b = args.only.partition(":")
        chosen = chosen[int(a):int(b) if b else int(a) + 1]
    table: list[dict[str, Any]] = []
    path = Path(args.json) if args.json else None
    if path is not None and path.exists():
        table = json.loads(path.read_text())
    done = {row["cell"] for row in table}
    looks = int(args.analysis_timeout - args.analysis_delay)
    print(f"{RATE_PER_S} requests/s, a look a second for {looks} s ({looks * RATE_PER_S} "
          f"requests a side at most), failure limit {args.failure_limit}")
    print(HEADER)
    mismatches, started = 0, time.monotonic()
    for index, cell in chosen:
        if cell.name in done:
            continue
        runs = args.runs if cell.kind == "limit" else (args.clean_runs or args.runs)
        out = Outcome()
        for b, lo in enumerate(range(0, runs, args.batch)):
            simulate(cell, min(args.batch, runs - lo), args.seed * 1000 + index * 50 + b,
                     args, criteria, out, args.check_runs if b == 0 else 0)
        row = summary(cell, out)
        mismatches += out.mismatches
        print(table_row(row), flush=True)
        if path is not None:
            table = [r for r in table if r["cell"] != cell.name] + [row]
            path.write_text(json.dumps(table, indent=1))
    print(f"{mismatches} mismatches with gate.evaluate; {time.monotonic() - started:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
