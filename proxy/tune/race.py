"""The race: several candidates shadowed on the same requests, judged and ranked (no I/O).

Each candidate is judged against old by the promotion gate (`proxy.gate.verdict.evaluate`:
answers, errors, lengths, latency) with its share of the error rate: 1 - confidence split
evenly over the candidates (Bonferroni), so the chance that any candidate passes while it
is beyond a limit, and so that the one promoted is, is at most 1 - confidence however many
candidates race and however often the race looks.

Candidates are ranked by paired latency: on every request both answered, which one was
faster. The share of requests on which A beat B has a confidence sequence
(`sequential.mean_bounds`, valid at every look), its own 1 - confidence split over the
pairs; once its upper bound is below one half, A is slower than B. A candidate slower than
one that passed the gate is eliminated at once; so is one that fails the gate (`failed`
when the failing check is its error rate: it crashed or refuses). The race ends when one
candidate has passed and every other has stopped, or at the deadline (the fastest passing
one by median then wins), or with no winner when none is left.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from proxy.capture.types import Capture
from proxy.compare.types import ExchangeRecord
from proxy.credentials import without_credentials
from proxy.gate.sequential import mean_bounds
from proxy.gate.verdict import GateCriteria, GateInputs, Verdict, evaluate

LaneState = Literal["waiting", "starting", "racing", "passed", "finalist", "eliminated",
                   "failed", "winner", "stopped"]
ALIVE: frozenset[LaneState] = frozenset({"racing", "passed"})
PENDING: frozenset[LaneState] = frozenset({"waiting", "starting"})
# Done measuring: no traffic, no container (a finalist may still win).
RETIRED: frozenset[LaneState] = frozenset({"finalist", "eliminated", "failed", "stopped"})


def answer_time_s(capture: Capture) -> float | None:
    """The whole answer's time, as the client waited for it; None when it failed."""
    if capture.error is not None or capture.cancelled or capture.status is None \
            or capture.status >= 400:
        return None
    return capture.e2e_s


@dataclass
class Lane:
    """One candidate's evidence and standing."""

    name: str
    url: str
    state: LaneState = "racing"
    reason: str = ""
    records: list[ExchangeRecord] = field(default_factory=list)
    times_s: dict[int, float] = field(default_factory=dict)  # request number -> answer time
    old_times_s: dict[int, float] = field(default_factory=dict)
    # Records not judged yet: an exchange that started earlier is still out (`look`).
    held: list[tuple[int, ExchangeRecord]] = field(default_factory=list)
    verdict: Verdict | None = None
    stopped_at_requests: int | None = None
    admitted_s: float = 0.0  # when it began to race (seconds since the tune began)
    past_deadline: bool = False  # passed and raced max_duration_s: done measuring

    @property
    def in_play(self) -> bool:
        """Still to be decided: waiting for a place, starting, or racing."""
        return self.state in ALIVE or self.state in PENDING

    def stop(self, state: LaneState, reason: str) -> None:
        """Stop racing. The records still held (`Race.look`) join `records` for the
        report's counts, not the answer times a finalist is ranked by: an exchange that
        started earlier is still out, and its quick successors alone would flatter it."""
        self.state, self.reason = state, reason
        self.records += [record for _, record in
                         sorted(self.held, key=lambda item: item[1].started_unix)]
        self.held = []
        self.stopped_at_requests = len(self.records)

    def release(self, until_unix: float) -> None:
        """Judge the held records of exchanges started before `until_unix`, in start
        order: a candidate's quick answers must not be judged while a hung one is out."""
        ready = sorted((item for item in self.held if item[1].started_unix < until_unix),
                       key=lambda item: item[1].started_unix)
        if not ready:
            return
        self.held = [item for item in self.held if item[1].started_unix >= until_unix]
        for number, record in ready:
            self.records.append(record)
            for capture in record.captures:
                took = answer_time_s(capture)
                if took is None:
                    continue
                if capture.role == "shadow":
                    self.times_s[number] = took
                elif capture.role == "primary":
                    self.old_times_s[number] = took

    def median_s(self) -> float | None:
        return statistics.median(self.times_s.values()) if self.times_s else None

    def paired_ratio(self) -> float | None:
        """The median, over requests both answered, of its answer time over old's: how
        lanes that raced at different times (rounds) compare on the same traffic mix."""
        ratios = [self.times_s[k] / self.old_times_s[k]
                  for k in self.times_s.keys() & self.old_times_s.keys() if self.old_times_s[k] > 0]
        return statistics.median(ratios) if ratios else None

    def as_json(self) -> dict[str, Any]:
        verdict = self.verdict
        old = statistics.median(self.old_times_s.values()) if self.old_times_s else None
        mine = self.median_s()
        return {"name": self.name, "url": without_credentials(self.url), "state": self.state, "reason": self.reason,
                "requests": len(self.records),
                "stopped_at_requests": self.stopped_at_requests,
                "verdict": verdict.verdict if verdict else None,
                "gate_reasons": verdict.reasons if verdict else [],
                "samples": verdict.samples if verdict else 0,
                "divergence_by_field": _divergence_by_field(self.records),
                "median_answer_s": mine, "old_median_answer_s": old,
                "median_ratio": mine / old if mine is not None and old else None,
                "paired_ratio": self.paired_ratio(),
                "gate_checks": [c.as_json() for c in verdict.checks] if verdict else []}


def _divergence_by_field(records: list[ExchangeRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for record in records:
        for comparison in record.comparisons:
            if comparison.outcome == "diverged":
                key = comparison.field or "tokens"
                out[key] = out.get(key, 0) + 1
    return out


@dataclass(frozen=True)
class RaceCriteria:
    """How a race judges: the gate's criteria (their confidence covers the whole choice),
    the confidence of the ranking, and the deadline."""

    gate: GateCriteria = field(default_factory=GateCriteria)
    rank_confidence: float = 0.95
    max_duration_s: float = 1800.0

    def __post_init__(self) -> None:
        if not 0 < self.rank_confidence < 1:
            raise ValueError(f"rank_confidence must be within (0, 1), got "
                             f"{self.rank_confidence!r}")
        if self.max_duration_s <= 0:
            raise ValueError(f"max_duration_s must be > 0, got {self.max_duration_s!r}")

    def per_candidate(self, candidates: int) -> GateCriteria:
        """Each candidate's gate: 1 - confidence split evenly over the candidates."""
        return replace(self.gate, confidence=1 - (1 - self.gate.confidence) / max(candidates, 1))

    def pair_alpha(self, candidates: int) -> float:
        pairs = max(candidates * (candidates - 1) // 2, 1)
        return (1 - self.rank_confidence) / pairs


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def faster_share_bounds(a: Lane, b: Lane, alpha: float) -> tuple[float, float, int]:
    """Bounds on the share of requests on which `a` answers faster than `b` (ties count
    half), over the requests both answered; and how many those were."""
    common = a.times_s.keys() & b.times_s.keys()
    wins = sum(1.0 if a.times_s[k] < b.times_s[k] else 0.5 if a.times_s[k] == b.times_s[k]
               else 0.0 for k in common)
    low, high = mean_bounds(wins, len(common), alpha)
    return low, high, len(common)


class Race:
    """The candidates' lanes and the rules that stop them (call `look` now and then).

    A candidate given with a URL races from the start; one given without (container
    mode) waits for one of `parallel` places (`begin_waiting`), starts, and races once
    `admit`ted. A passed lane that holds a place a waiting one needs, with no rival left
    or past its own deadline, retires as a `finalist`; lanes that never raced together
    are compared by `paired_ratio` (each one's answer time over old's on the same
    requests). Each lane's deadline is `max_duration_s` after it was admitted."""

    def __init__(self, candidates: dict[str, str], criteria: RaceCriteria,
                 parallel: int | None = None) -> None:
        if not candidates:
            raise ValueError("a race needs at least one candidate")
        if parallel is not None and parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {parallel!r}")
        self.criteria = criteria
        self.parallel = parallel
        self.lanes = {name: Lane(name, url, "racing" if url else "waiting")
                      for name, url in candidates.items()}
        # Fixed for all K candidates before any data, whatever the rounds.
        self.gate_criteria = criteria.per_candidate(len(candidates))
        self.pair_alpha = criteria.pair_alpha(len(candidates))
        self.winner: str | None = None
        self.over = False
        self.ending = ""

    def racing(self) -> dict[str, str]:
        """Name -> URL of the candidates still shadowed."""
        return {n: lane.url for n, lane in self.lanes.items() if lane.state in ALIVE}

    def free_places(self) -> int:
        used = sum(1 for lane in self.lanes.values()
                   if lane.state in ALIVE or lane.state == "starting")
        return len(self.lanes) if self.parallel is None else max(self.parallel - used, 0)

    def begin_waiting(self, room: int | None = None) -> list[str]:
        """The waiting candidates that fit in the free places (and in `room`, the places
        the caller can really give: a stopped candidate's container not yet removed still
        holds its GPUs), now `starting`."""
        if self.over:
            return []
        waiting = [lane for lane in self.lanes.values() if lane.state == "waiting"]
        fits = self.free_places() if room is None else min(self.free_places(), max(room, 0))
        begun = waiting[:fits]
        for lane in begun:
            lane.state, lane.reason = "starting", "starting its engine"
        return [lane.name for lane in begun]

    def admit(self, name: str, url: str, elapsed_s: float) -> None:
        """A started candidate's engine is ready and is the one meant: it races now."""
        lane = self.lanes[name]
        if lane.state != "starting" or self.over:
            return
        lane.url, lane.state, lane.reason, lane.admitted_s = url, "racing", "", elapsed_s

    def observe(self, name: str, number: int, record: ExchangeRecord) -> None:
        """Request `number`'s record for candidate `name` (ignored once it stopped)."""
        lane = self.lanes.get(name)
        if lane is None or lane.state not in ALIVE:
            return
        lane.held.append((number, record))

    def fail(self, name: str, reason: str) -> None:
        """Stop a candidate for a fault seen outside the gate (not ready, another model)."""
        lane = self.lanes[name]
        if lane.in_play:
            lane.stop("failed", reason)

    def look(self, elapsed_s: float,
             until: Callable[[str], float] = lambda url: math.inf) -> list[str]:
        """Judge every candidate still in the race, on the records of exchanges that
        started before `until(its url)` (`Mirror.judged_until`); the changes made, as
        sentences."""
        if self.over:
            return []
        for lane in self.lanes.values():
            if lane.state in ALIVE:
                lane.release(until(lane.url))
        changes = [self._judge(lane) for lane in self.lanes.values() if lane.state in ALIVE]
        changes += self._rank()
        changes += self._deadlines(elapsed_s)
        changes += self._retire()
        changes += self._finish()
        return [c for c in changes if c]

    def _judge(self, lane: Lane) -> str:
        verdict = evaluate(GateInputs.from_records(lane.records), self.gate_criteria)
        lane.verdict = verdict
        if verdict.verdict == "fail":
            crashed = any(c.name == "errors" and c.status == "fail" for c in verdict.checks)
            lane.stop("failed" if crashed else "eliminated", f"gate: {verdict.reasons[0]}")
            return f"{lane.name} {lane.state}: {lane.reason}"
        if verdict.verdict == "pass" and lane.state == "racing":
            lane.state, lane.reason = "passed", "gate passed; ranking by latency"
            return f"{lane.name} passed the gate"
        if verdict.verdict != "pass" and lane.state == "passed":
            lane.state, lane.reason = "racing", "gate no longer passes"
        return ""

    def _rank(self) -> list[str]:
        changes = []
        passed = [lane for lane in self.lanes.values() if lane.state == "passed"]
        for lane in self.lanes.values():
            if lane.state not in ALIVE:
                continue
            for best in passed:
                if best is lane or best.state != "passed":
                    continue
                _, high, n = faster_share_bounds(lane, best, self.pair_alpha)
                if high < 0.5:
                    lane.stop("eliminated", f"slower than {best.name}: faster on at most "
                              f"{high:.0%} of {n} requests both answered")
                    changes.append(f"{lane.name} eliminated: {lane.reason}")
                    break
        return changes

    def _past_deadline(self, lane: Lane, elapsed_s: float) -> bool:
        return elapsed_s - lane.admitted_s >= self.criteria.max_duration_s

    def _deadlines(self, elapsed_s: float) -> list[str]:
        """Undecided lanes past their deadline stop; passed ones are done measuring."""
        changes = []
        for lane in self.lanes.values():
            if lane.state == "racing" and self._past_deadline(lane, elapsed_s):
                lane.stop("stopped", "undecided at the deadline")
                changes.append(f"{lane.name} stopped: {lane.reason}")
            elif lane.state == "passed" and self._past_deadline(lane, elapsed_s):
                lane.past_deadline = True
        return changes

    def _retire(self) -> list[str]:
        """A passed lane gives its place to a waiting one when it has no rival to be
        ranked against (or its deadline came) and no place is free."""
        waiting = any(lane.state == "waiting" for lane in self.lanes.values())
        if not waiting or self.free_places() > 0:
            return []
        alive = [lane for lane in self.lanes.values() if lane.state in ALIVE]
        for lane in alive:
            alone = len(alive) == 1 and not any(
                other.state == "starting" for other in self.lanes.values())
            if lane.state == "passed" and (alone or lane.past_deadline):
                lane.stop("finalist", "gate passed; made way for the next candidates")
                return [(f"{lane.name} is a finalist (paired answer time "
                         f"{_ratio(lane.paired_ratio())} of old's); its place goes to the "
                         "next candidate")]
        return []

    def _finish(self) -> list[str]:
        lanes = list(self.lanes.values())
        if any(lane.state in PENDING for lane in lanes):
            return []
        alive = [lane for lane in lanes if lane.state in ALIVE]
        passed = [lane for lane in alive if lane.state == "passed"]
        done = all(lane.past_deadline for lane in passed)
        if any(lane.state == "racing" for lane in alive) or (len(passed) > 1 and not done):
            return []
        finalists = passed + [lane for lane in lanes if lane.state == "finalist"]
        if not finalists:
            return [self._end(None, "no candidate is left: none passed the gate")]
        if len(finalists) == 1:
            return [self._end(finalists[0], "the only candidate left passed the gate")]
        best = min(finalists, key=lambda lane: lane.paired_ratio() or float("inf"))
        for lane in finalists:
            if lane is not best:
                lane.stop("stopped", f"{best.name} answers faster against old "
                                     f"({_ratio(best.paired_ratio())} vs "
                                     f"{_ratio(lane.paired_ratio())} of old's time)")
        return [self._end(best, "the fastest candidate that passed the gate, by its answer "
                                "time over old's on the same requests")]

    def _end(self, winner: Lane | None, why: str) -> str:
        self.over = True
        self.ending = why
        if winner is None:
            return f"race over without a winner: {why}"
        winner.state, winner.reason = "winner", why
        self.winner = winner.name
        return f"{winner.name} wins: {why}"

    def abort(self, reason: str) -> None:
        for lane in self.lanes.values():
            if lane.in_play:
                lane.stop("stopped", reason)
        self.over, self.ending = True, reason

    def as_json(self) -> dict[str, Any]:
        return {"winner": self.winner, "over": self.over, "ending": self.ending,
                "gate_confidence_per_candidate": self.gate_criteria.confidence,
                "rank_alpha_per_pair": self.pair_alpha,
                "candidates": [lane.as_json() for lane in self.lanes.values()]}
