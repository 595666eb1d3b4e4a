"""The gate's checks on counts: match rate, error rate, output lengths (no I/O).

Each check compares bounds with a limit: pass when the bound on the favourable side
clears it, fail when the bound on the other side is beyond it, inconclusive otherwise;
an inconclusive one says how far its bound is and about how many more samples at the
current rates would decide it. Bounds are confidence sequences for the live gate
(`proxy.gate.sequential`) and Clopper-Pearson intervals for one look at a fixed set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from proxy.gate.criteria import GateCriteria
from proxy.gate.sequential import (
    Side,
    mean_bounds,
    paired_excess_bound,
    paired_excess_test,
)
from proxy.gate.tally import ErrorPairs, GateInputs

Status = Literal["pass", "fail", "inconclusive"]
MOST_SCALE = 64.0  # "more samples" is searched up to this many times the current ones


@dataclass(frozen=True)
class Need:
    """How far an inconclusive check is from deciding: its bound's distance past the limit
    (`gap`) and about how many more samples would decide it (None: not within
    MOST_SCALE x), counted in the check's own samples, of which it has `of` (None: the
    gate's samples, the deterministic requests compared). Pairs and latency samples come
    with every request, deterministic or not: `proxy.cutover.eta` turns a need into time
    at the rate the check's own samples arrive.)"""

    more_samples: int | None
    gap: float | None = None
    has_gap: bool = True  # False: a count short of a minimum, no bound to be past
    of: int | None = None

    def as_json(self) -> dict[str, object]:
        head: dict[str, object] = {"gap": self.gap} if self.has_gap else {}
        return {**head, "more_samples": self.more_samples}


@dataclass(frozen=True)
class Check:
    """One check's outcome: what the cutover reads (`status`, `need`) typed; `facts`, its
    bounds and limits, only written out (the admin API, reports)."""

    name: str
    status: Status
    reason: str
    facts: Mapping[str, object] = field(default_factory=dict)
    need: Need | None = None  # set on an inconclusive check that projects its need

    def facts_json(self) -> dict[str, object]:
        return {**self.facts, **(self.need.as_json() if self.need is not None else {})}

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "status": self.status, "reason": self.reason,
                **self.facts_json()}


def rate_bounds(successes: float, n: int, alpha: float, c: GateCriteria,
                scale: float = 1.0) -> tuple[float, float]:
    """Bounds on a rate in [0, 1]: time-uniform at alpha for the live gate, a two-sided
    Clopper-Pearson interval at the criteria's confidence for one look; `scale`: as if
    the sample were that many times larger at the same rate."""
    if scale != 1.0:
        m = round(n * scale)
        successes, n = (successes * m / n if n else 0.0), m
    if c.looks == "continuous":
        return mean_bounds(successes, n, alpha)
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import beta  # lazy: heavy import, one look only

    tail = (1 - c.confidence) / 2
    k = round(successes)
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return low, high


def more_samples(n: int, decides: Callable[[float], bool],
                 most: float = MOST_SCALE) -> int | None:
    """About how many more samples until `decides(scale)` (the check decided with every
    count scaled by `scale`, rates unchanged); None when not within `most` times."""
    if n <= 0 or not decides(most):
        return None
    low, high = 1.0, most
    for _ in range(24):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if decides(mid) else (mid, high)
    return max(1, math.ceil(n * high) - n)


def needs_text(more: int | None, unit: str = "samples") -> str:
    if more is None:
        return f"not decidable within {MOST_SCALE:g}x the {unit} at the current rates"
    return f"about {more} more {unit} at the current rates"


def match_rate(inputs: GateInputs, c: GateCriteria) -> Check:
    new, base = inputs.new_vs_old, inputs.baseline_vs_old
    if c.close_counts_as_match:
        new = new.counting_close_as_match()
        base = base.counting_close_as_match() if base is not None else None
    # Two bounds decide each side (new's rate, the baseline's): each gets half that side's
    # alpha. Without a baseline the one bound on new's rate gets all of it.
    has_base = base is not None and base.compared > 0
    pass_side = c.pass_alpha() / (2 if has_base else 1)
    fail_side = c.fail_alpha() / (2 if has_base else 1)
    if not has_base and c.require_baseline:
        return Check("match_rate", "inconclusive", "no baseline (old-vs-old) comparisons yet")

    def judge(scale: float) -> tuple[Status, float, float, float, float]:
        low = rate_bounds(new.matched, new.compared, pass_side, c, scale)[0]
        high = rate_bounds(new.matched, new.compared, fail_side, c, scale)[1]
        if base is None or not has_base:
            return _against(low, high, c.min_match_rate, c.min_match_rate), low, high, 1.0, 1.0
        b_high = rate_bounds(base.matched, base.compared, pass_side, c, scale)[1]
        b_low = rate_bounds(base.matched, base.compared, fail_side, c, scale)[0]
        if c.looks == "once":  # one look at a fixed set: the baseline's rate as measured
            b_low = b_high = base.match_rate or 0.0
        status = _against(low, high, b_high - c.max_excess_divergence,
                          b_low - c.max_excess_divergence)
        return status, low, high, b_low, b_high

    status, low, high, b_low, b_high = judge(1.0)
    if has_base:
        assert base is not None
        pass_at, fail_at = b_high - c.max_excess_divergence, b_low - c.max_excess_divergence
        against = (f"baseline {base.match_rate:.3f} ({base.matched}/{base.compared}, bounds "
                   f"{b_low:.3f}..{b_high:.3f}) - {c.max_excess_divergence:g}")
    else:
        pass_at = fail_at = c.min_match_rate
        against = "absolute minimum"
    facts: dict[str, object] = {
        "new_vs_old": {**asdict(new), "rate": new.match_rate, "interval": [low, high]},
        "baseline_vs_old": None if base is None else {
            **asdict(base), "rate": base.match_rate, "interval": [b_low, b_high]},
        "threshold": max(0.0, pass_at), "fail_below": max(0.0, fail_at),
        "alpha": {"pass": c.pass_alpha(), "fail": c.fail_alpha()}}
    text = (f"new-vs-old match rate {new.match_rate or 0:.3f} ({new.matched}/{new.compared}, "
            f"bounds {low:.3f}..{high:.3f}) vs {max(0.0, pass_at):.3f} ({against})")
    if status == "fail":
        return Check("match_rate", "fail", text + ": upper bound below", facts)
    if status == "pass":
        if has_base and base is not None and base.compared < c.min_baseline_samples:
            return Check("match_rate", "inconclusive", f"baseline has {base.compared} "
                         f"comparisons, need {c.min_baseline_samples}", facts)
        return Check("match_rate", "pass", text + ": lower bound clears it", facts)
    more = more_samples(new.compared, lambda k: judge(k)[0] == "pass")
    need = Need(more, pass_at - low)
    unit = "prompts" if c.looks == "once" else "samples"
    needs = (f"; a pass needs {new.compared + more} or more {unit} at this rate"
             if c.looks == "once" and more is not None else f"; {needs_text(more, unit)}")
    return Check("match_rate", "inconclusive",
                 f"{text}: lower bound {pass_at - low:.3f} short{needs}", facts, need)


def _against(low: float, high: float, pass_at: float, fail_below: float) -> Status:
    if high < fail_below:
        return "fail"
    return "pass" if low >= pass_at else "inconclusive"


def error_rate(inputs: GateInputs, c: GateCriteria) -> Check:
    n_new, e_new = inputs.requests.get("shadow", 0), inputs.errors.get("shadow", 0)
    n_old, e_old = inputs.requests.get("primary", 0), inputs.errors.get("primary", 0)
    e_new, e_old = min(e_new, n_new), min(e_old, n_old)
    excess = c.max_error_rate_excess
    pass_side, fail_side = c.pass_alpha() / 2, c.fail_alpha() / 2
    facts: dict[str, object] = {"new": {"requests": n_new, "errors": e_new},
                             "old": {"requests": n_old, "errors": e_old}, "excess": excess}
    if n_new == 0:
        return Check("errors", "inconclusive", "no requests of the new version completed", facts)
    pairs = inputs.error_pairs
    if pairs is not None and pairs.n > 0 and c.looks == "continuous":
        return _paired_errors(pairs, facts, (e_new, n_new), (e_old, n_old), c)
    facts["basis"] = "unpaired"

    def judge(scale: float) -> tuple[Status, float, float, float, float]:
        # fail: new's lower and old's upper bound on the fail side's alpha; pass: new's
        # upper and old's lower bound on the pass side's
        low = rate_bounds(e_new, n_new, fail_side, c, scale)[0]
        o_high = rate_bounds(e_old, n_old, fail_side, c, scale)[1]
        high = rate_bounds(e_new, n_new, pass_side, c, scale)[1]
        o_low = rate_bounds(e_old, n_old, pass_side, c, scale)[0]
        if low > o_high + excess:
            return "fail", low, high, o_low, o_high
        if c.looks == "once":  # a fixed set: fail only when significant, as before
            rate_old = e_old / n_old if n_old else 0.0
            o_low = o_high = rate_old
            return ("pass" if e_new / n_new <= rate_old + excess else "inconclusive",
                    low, high, o_low, o_high)
        return ("pass" if high <= o_low + excess else "inconclusive"), low, high, o_low, o_high

    status, low, high, o_low, o_high = judge(1.0)
    facts.update(limit=o_low + excess, bounds=[low, high], old_bounds=[o_low, o_high])
    text = (f"new error rate {e_new / n_new:.3f} ({e_new}/{n_new}, bounds {low:.3f}..{high:.3f})"
            f" vs old's {e_old / n_old if n_old else 0:.3f} (bounds {o_low:.3f}..{o_high:.3f})"
            f" + {excess:g}")
    if status != "inconclusive":
        return Check("errors", status, text, facts)
    more = more_samples(n_new, lambda k: judge(k)[0] == "pass")
    return Check("errors", "inconclusive", f"{text}: upper bound {high - o_low - excess:.3f} "
                 f"over; {needs_text(more, 'requests')}", facts,
                 Need(more, high - o_low - excess, of=n_new))


def _paired_errors(pairs: ErrorPairs, facts: dict[str, object], new: tuple[int, int],
                   old: tuple[int, int], c: GateCriteria) -> Check:
    """The error check on pairs (`sequential.paired_excess_test`): one test a side, so each
    spends its side's whole alpha, where the unpaired check's two bounds share it."""
    excess = c.max_error_rate_excess
    pass_side, fail_side = c.pass_alpha(), c.fail_alpha()

    def judge(scale: float) -> Status:
        n, up, down = pairs.n * scale, pairs.new_only * scale, pairs.old_only * scale
        if paired_excess_test(n, up, down, excess, fail_side, "fail").rejects:
            return "fail"
        passed = paired_excess_test(n, up, down, excess, pass_side, "pass").rejects
        return "pass" if passed else "inconclusive"

    shown = (pairs.n, pairs.new_only, pairs.old_only)
    sides: tuple[tuple[Side, float], ...] = (("pass", pass_side), ("fail", fail_side))
    tests = {side: paired_excess_test(*shown, excess, alpha, side) for side, alpha in sides}
    status: Status = ("fail" if tests["fail"].rejects
                      else "pass" if tests["pass"].rejects else "inconclusive")  # judge(1.0)'s rule
    low = paired_excess_bound(*shown, fail_side, "fail")
    high = paired_excess_bound(*shown, pass_side, "pass")
    facts.update(basis="paired", pairs={"n": pairs.n, "new_only": pairs.new_only,
                                        "old_only": pairs.old_only},
                 limit=excess, excess_bounds=[low, high],
                 log_wealth={side: test.log_wealth for side, test in tests.items()},
                 log_threshold={"pass": math.log(1 / pass_side),
                                "fail": math.log(1 / fail_side)})
    (e_new, n_new), (e_old, n_old) = new, old
    text = (f"new error rate {e_new / n_new:.3f} ({e_new}/{n_new}) vs old's "
            f"{e_old / n_old if n_old else 0:.3f} ({e_old}/{n_old}) + {excess:g}; paired, "
            f"{pairs.n} pairs ({pairs.new_only} new-only, {pairs.old_only} old-only "
            f"errors), new - old bounds {low:+.3f}..{high:+.3f}")
    if status != "inconclusive":
        return Check("errors", status, text, facts)
    more = more_samples(pairs.n, lambda k: judge(k) == "pass")
    return Check("errors", "inconclusive", f"{text}: upper bound {high - excess:.3f} over; "
                 f"{needs_text(more, 'pairs')}", facts,
                 Need(more, high - excess, of=pairs.n))


def length_shift(old: Sequence[float], new: Sequence[float],
                 c: GateCriteria) -> list[Check]:
    """P(new > old) - P(new < old) over per-request pairs (old's and new's output tokens
    on the same request; a mean of signs in [-1, 1]), bounded on both sides; beyond
    +-max_length_shift fails."""
    shift = c.max_length_shift
    if shift is None or (not old and not new):
        return []  # not judged, or lengths not recorded by the caller
    n = min(len(old), len(new))
    if n < c.min_latency_samples:
        return [Check("lengths", "inconclusive", f"output lengths: {len(old)} old / {len(new)} "
                      f"new samples, need {c.min_latency_samples}")]
    total = sum((new[i] > old[i]) - (new[i] < old[i]) for i in range(n))
    successes = (total + n) / 2

    def judge(scale: float) -> tuple[Status, float, float]:
        # a wrong pass needs the bound on the side the truth lies beyond to miss: each
        # side of one confidence sequence misses with probability at most its alpha
        low, high = rate_bounds(successes, n, c.pass_alpha(), c, scale)
        low, high = 2 * low - 1, 2 * high - 1
        f_low, f_high = rate_bounds(successes, n, c.fail_alpha(), c, scale)
        if 2 * f_low - 1 > shift or 2 * f_high - 1 < -shift:
            return "fail", low, high
        return ("pass" if -shift <= low and high <= shift else "inconclusive"), low, high

    status, low, high = judge(1.0)
    facts: dict[str, object] = {"shift": total / n, "bounds": [low, high], "limit": shift,
                             "pairs": n}
    text = (f"output length shift {total / n:+.2f} (bounds {low:+.2f}..{high:+.2f}, "
            f"limit +-{shift:g}, {n} pairs)")
    if status != "inconclusive":
        return [Check("lengths", status, text, facts)]
    more = more_samples(n, lambda k: judge(k)[0] == "pass")
    return [Check("lengths", "inconclusive", f"{text}; {needs_text(more)}", facts,
                  Need(more, max(high - shift, -shift - low)))]  # n: capped, as p50

