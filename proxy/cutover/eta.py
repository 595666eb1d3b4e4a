"""When the gate will decide: the binding check and the time left at the current traffic.

Pure: takes the verdict's checks (each inconclusive one carrying its `Check.need`, the
samples it would take), the request rate seen so far and the analysis time left; returns one
typed estimate and the line `cutover status` shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.gate.checks import MOST_SCALE, Check
from proxy.gate.criteria import RATIO_LIMITS

# Check names as an operator reads them (the latency checks are named by criteria field).
_LABELS = {e.field: e.label for e in RATIO_LIMITS} | {
    "match_rate": "match rate", "errors": "error rate", "lengths": "output lengths",
    "samples": "minimum samples"}


# A check is hopeless when, on evidence enough to project it, it is not decidable within
# MOST_SCALE x the samples (its estimate sits at or past its limit), or, for a check whose
# evidence accumulates (match rate, errors, lengths), it needs more than HOPELESS_FACTOR x
# the analysis time left and at least as many samples again as it has (the projection is
# from the bounds' current widths: near the deadline a small need is within its error).
# A latency check's need is never projected in time: a paired p50 reads the newest
# `tally.LATENCY_WINDOW` requests (beyond them more traffic does not tighten it), and a
# quantile's need rests on its tail's few events, so "needs 9,000 more" says little of
# when it decides.
HOPELESS_FACTOR = 4.0
# Evidence enough: RATE_FLOOR requests for every check (a paired p50 judges a share of
# requests, a rate like the match rate's: its projection rests on the gap between that
# share and 1/2, which 500 requests do not pin down), and for a tail quantile TAIL_EVENTS
# samples beyond it (5,000 requests for a p99). With less, projections swing tenfold from
# one look to the next and end good cutovers (bench/gate_early_end.py, bench/README.md).
TAIL_EVENTS = 50
RATE_FLOOR = 2000
_QUANTILES = {e.field: e.quantile for e in RATIO_LIMITS}


def evidence_floor(check: str) -> int:
    """Samples before `check`'s projection is trusted enough to end a cutover on it."""
    q = _QUANTILES.get(check)
    return RATE_FLOOR if q is None else max(RATE_FLOOR, math.ceil(TAIL_EVENTS / min(q, 1 - q)))


@dataclass(frozen=True)
class Estimate:
    """The check needing the most samples, and what that costs at `rate_per_s`."""

    check: str | None  # None: every check decided
    more_samples: int | None  # None with a check: not decidable within MOST_SCALE x
    rate_per_s: float
    seconds_left: float | None  # None: undecidable, or no traffic yet
    too_slow: bool  # will not decide before the analysis timeout
    # A check that cannot decide in time on evidence enough to say so: why, in words.
    hopeless_reason: str | None = None

    @property
    def hopeless(self) -> bool:
        return self.hopeless_reason is not None

    def line(self) -> str:
        if self.check is None:
            return "every check decided"
        if self.more_samples is None and not self.too_slow:
            return f"waiting for {self.check}: no estimate yet (too few samples)"
        if self.more_samples is None:
            return (f"waiting for {self.check}: not decidable within {MOST_SCALE:g}x "
                    "the samples at the current rates")
        if self.seconds_left is None:
            return f"waiting for {self.check}: {self.more_samples} more samples, no traffic yet"
        text = (f"waiting for {self.check}: about {_duration(self.seconds_left)} "
                f"at {self.rate_per_s:.1f} req/s")
        return text + (": more than the analysis timeout left" if self.too_slow else "")


def _more(check: Check, samples: int) -> float | None:
    """The check's need in the gate's samples: a check counting its own samples (pairs,
    latency samples: `Need.of`) gets them at its own rate, assumed in proportion to the
    gate's samples so far."""
    need = check.need
    if need is None or need.more_samples is None:
        return None
    if need.of is None or need.of <= 0 or samples <= 0:
        return float(need.more_samples)
    return need.more_samples * samples / need.of


def estimate(checks: Sequence[Check], rate_per_s: float,
             timeout_left_s: float | None, samples: int = 0) -> Estimate:
    """The binding check is the inconclusive one needing the most samples (an undecidable
    one binds before any finite need); `samples` (the requests compared) says which
    checks' projections are trusted enough to call the gate hopeless."""
    waiting = [c for c in checks if c.status == "inconclusive"]
    if not waiting:
        return Estimate(None, None, rate_per_s, None, False)
    # A check without an estimate (no samples of its kind yet) cannot be ranked: the
    # binding one is among those with one, else the first waiting.
    ranked = [c for c in waiting if c.need is not None] or waiting[:1]
    binding = max(ranked, key=lambda c: math.inf if (more := _more(c, samples)) is None
                  else more)
    name = _label(binding)
    reason = _hopeless(ranked, rate_per_s, timeout_left_s, samples)
    more = _more(binding, samples)
    if more is None:  # with no request compared yet, nothing is known to be undecidable
        return Estimate(name, None, rate_per_s, None, binding.need is not None and samples > 0,
                        reason)
    seconds = more / rate_per_s if rate_per_s > 0 else None
    too_slow = (seconds is not None and timeout_left_s is not None
                and seconds > timeout_left_s)
    return Estimate(name, math.ceil(more), rate_per_s, seconds, too_slow, reason)


def _label(check: Check) -> str:
    return _LABELS.get(check.name, check.name)


def _hopeless(ranked: list[Check], rate: float, left: float | None,
              samples: int) -> str | None:
    """The first check that cannot decide before the timeout, on evidence enough."""
    if rate <= 0 or left is None:
        return None  # no traffic yet, or no deadline: nothing to project
    for check in ranked:
        if check.need is None or samples < evidence_floor(check.name):
            continue
        more = _more(check, samples)
        if more is None:
            return (f"{_label(check)} is not decidable within {MOST_SCALE:g}x the "
                    f"{samples} samples at the current rates")
        if check.name in _QUANTILES:
            continue  # latency is judged on a window of the newest requests: not in time
        if more / rate > HOPELESS_FACTOR * left and more >= samples:
            return (f"{_label(check)} needs about {math.ceil(more)} more samples, "
                    f"{_duration(more / rate)} at {rate:.1f} req/s")
    return None


# A gate hopeless on every look for this long ends the shadowing (not the estimate of one
# look: the first ones rest on few samples).
HOPELESS_FOR_S = 60.0


def hopeless_since(previous: float | None, est: Estimate | None, now: float) -> float | None:
    """Since when every look has been hopeless: kept while this one is, else None."""
    if est is None or not est.hopeless:
        return None
    return previous if previous is not None else now


def ends_early(since: float | None, now: float) -> bool:
    """Hopeless on every look for HOPELESS_FOR_S: shadowing on cannot decide in time."""
    return since is not None and now - since >= HOPELESS_FOR_S


def rate_per_s(samples_then: int, then_s: float, samples_now: int, now_s: float) -> float:
    """Samples a second between two looks; 0.0 when no time passed or none arrived."""
    if now_s <= then_s or samples_now <= samples_then:
        return 0.0
    return (samples_now - samples_then) / (now_s - then_s)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"
