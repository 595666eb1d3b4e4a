"""The cutover benchmark's figures from what the clients saw and the orchestrator's marks.

Pure: every input is a value (outcomes with `perf_counter` times, marks on the same clock),
so the arithmetic is tested without Docker. A round gives one number per figure; the
figures are medians over the rounds with their spread (bench/_figures.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _figures import Figure, figure, percentile

from proxy.demo.steady import Outcome

SLICE_S = 1.0  # the blip is judged on requests overlapping the switch +- this
PROMOTE_TARGET_MS = 100.0  # the target: decision -> first answer from new
BLIP_TARGET_RATIO = 1.5  # ours: the switch's worst TTFT within 1.5x a slice without one
ROLLBACK_RUNNING_TARGET_MS = 1000.0  # ours: with the old one running, a rollback is a switch


@dataclass(frozen=True)
class Switch:
    """One routing change asked for through the admin API, on the perf_counter clock."""

    sent_s: float  # just before the command was sent
    acked_s: float  # its answer came
    recorded_s: float | None = None  # the transition it caused, from the status history
    machine_s: float | None = None  # the reconciler's own `rollback_s` (rollbacks only)


@dataclass(frozen=True)
class RoundMarks:
    """A round: a control window and a switch window (the promotion mid-window) of one
    cutover, its rollback with the old container running, then a second cutover taken to
    `done` (old stopped) and rolled back."""

    index: int
    control: tuple[float, float]
    switch_window: tuple[float, float]
    promote: Switch
    rollback_running: Switch
    rollback_stopped: Switch


def answered_at(o: Outcome) -> float:
    return o.started_s + o.e2e_s


def first_answer(probes: Sequence[Outcome], fingerprint: str, after_s: float) -> Outcome | None:
    """The earliest answer from `fingerprint` to a probe sent at or after `after_s`."""
    hits = [o for o in probes if o.ok and o.fingerprint == fingerprint and o.started_s >= after_s]
    return min(hits, key=answered_at) if hits else None


def last_sent(probes: Sequence[Outcome], fingerprint: str, after_s: float,
              before_s: float) -> Outcome | None:
    """The last probe sent in [after_s, before_s) that `fingerprint` answered."""
    hits = [o for o in probes if o.fingerprint == fingerprint and after_s <= o.started_s < before_s]
    return max(hits, key=lambda o: o.started_s) if hits else None


def ttfts_ms(steady: Sequence[Outcome], start_s: float, end_s: float) -> list[float]:
    """TTFTs of the streamed requests whose lifetime overlaps [start_s, end_s]."""
    return [o.ttft_s * 1000 for o in steady
            if o.stream and o.ttft_s is not None and o.started_s < end_s
            and answered_at(o) > start_s]


def _since_ms(o: Outcome | None, at_s: float, answered: bool = True) -> float:
    if o is None:
        return math.nan
    return ((answered_at(o) if answered else o.started_s) - at_s) * 1000


def _worst_p99(values: Sequence[float]) -> tuple[float, float]:
    return (max(values) if values else math.nan), percentile(values, 99)


def round_numbers(marks: RoundMarks, steady: Sequence[Outcome], probes: Sequence[Outcome],
                  old_fp: str, new_fp: str) -> dict[str, float]:
    """Every per-round number the figures are made of (milliseconds, counts)."""
    t0 = marks.promote.sent_s
    first_new = first_answer(probes, new_fp, t0)
    last_old = last_sent(probes, old_fp, t0, marks.switch_window[1])
    middle = sum(marks.control) / 2
    control = ttfts_ms(steady, middle - SLICE_S, middle + SLICE_S)
    probe_ms = [o.e2e_s * 1000 for o in probes if o.ok and marks.control[0] <= o.started_s
                and answered_at(o) <= marks.control[1]]
    nums: dict[str, float] = {
        "promote_first_new_answer_ms": _since_ms(first_new, t0),
        "promote_first_new_sent_ms": _since_ms(first_new, t0, answered=False),
        "promote_last_old_sent_ms": _since_ms(last_old, t0, answered=False),
        "promote_acked_ms": (marks.promote.acked_s - t0) * 1000,
        "promote_recorded_ms": ((marks.promote.recorded_s - t0) * 1000
                                if marks.promote.recorded_s is not None else math.nan),
        "probe_control_median_ms": percentile(probe_ms, 50),
        "new_before_promote": float(sum(
            1 for o in probes if o.fingerprint == new_fp
            and marks.switch_window[0] <= o.started_s < t0)),
        "control_requests": float(len(control)),
    }
    nums["control_worst_ms"], nums["control_p99_ms"] = _worst_p99(control)
    switches = {"switch": (marks.promote, first_new),
                "rollback_running": (marks.rollback_running,
                                     first_answer(probes, old_fp, marks.rollback_running.sent_s)),
                "rollback_stopped": (marks.rollback_stopped,
                                     first_answer(probes, old_fp, marks.rollback_stopped.sent_s))}
    for name, (switch, first) in switches.items():
        # the slice is centred on the routing change as the clients saw it
        at = first.started_s if first is not None else switch.sent_s
        around = ttfts_ms(steady, at - SLICE_S, at + SLICE_S)
        nums[f"{name}_worst_ms"], nums[f"{name}_p99_ms"] = _worst_p99(around)
        nums[f"{name}_requests"] = float(len(around))
    for name in ("rollback_running", "rollback_stopped"):
        switch, first = switches[name]
        nums[f"{name}_first_old_answer_ms"] = _since_ms(first, switch.sent_s)
        nums[f"{name}_machine_ms"] = (switch.machine_s * 1000 if switch.machine_s is not None
                                      else math.nan)
    return nums


def failures(steady: Sequence[Outcome], probes: Sequence[Outcome]) -> dict[str, int]:
    """Failed or short answers over the whole run, by kind (empty: none)."""
    return dict(Counter(f"{o.error}" for o in (*steady, *probes) if not o.ok))


def figures(rounds: Sequence[dict[str, float]], failed: int, answered: int) -> list[Figure]:
    """The table's lines from the rounds' numbers."""
    def col(key: str) -> list[float]:
        return [r[key] for r in rounds]

    def vs_control(name: str, key: str, ref_key: str, **target: Any) -> Figure:
        return figure("blip", name, col(key), "ms", reference="control slice",
                      reference_rounds=col(ref_key), compare="ratio", **target)

    def rollback(name: str, key: str, judged: bool) -> Figure:
        if not judged:
            return figure("rollback", name, col(key), "ms")
        return figure("rollback", name, col(key), "ms", op="<=", limit=ROLLBACK_RUNNING_TARGET_MS,
                      target=f"<= {ROLLBACK_RUNNING_TARGET_MS:g} ms")
    return [
        figure("promote", "decision -> first answer from new (request sent after it)",
               col("promote_first_new_answer_ms"), "ms",
               reference="a probe's answer time (control)",
               reference_rounds=col("probe_control_median_ms"), compare="delta",
               target=f"<= {PROMOTE_TARGET_MS:g} ms", op="<=", limit=PROMOTE_TARGET_MS),
        figure("promote", "decision -> that request's send", col("promote_first_new_sent_ms"),
               "ms"),
        figure("promote", "decision -> last request sent that old answered",
               col("promote_last_old_sent_ms"), "ms"),
        figure("promote", "decision -> 'promoting' in the status history",
               col("promote_recorded_ms"), "ms"),
        figure("promote", "decision -> the admin API's answer", col("promote_acked_ms"), "ms"),
        figure("promote", "requests sent before the decision answered by new",
               col("new_before_promote"), "", target="= 0", op="<=", limit=0.0),
        vs_control(f"worst streamed TTFT, promotion +-{SLICE_S:g} s", "switch_worst_ms",
                   "control_worst_ms", target=f"<= x{BLIP_TARGET_RATIO:g}", op="<=",
                   limit=BLIP_TARGET_RATIO, judge_relation=True),
        vs_control(f"p99 streamed TTFT, promotion +-{SLICE_S:g} s", "switch_p99_ms",
                   "control_p99_ms"),
        vs_control(f"worst streamed TTFT, rollback (old running) +-{SLICE_S:g} s",
                   "rollback_running_worst_ms", "control_worst_ms"),
        vs_control(f"worst streamed TTFT, rollback (old stopped) +-{SLICE_S:g} s",
                   "rollback_stopped_worst_ms", "control_worst_ms"),
        rollback("old running: rollback_s (status)", "rollback_running_machine_ms", True),
        rollback("old running: command -> first answer from old",
                 "rollback_running_first_old_answer_ms", True),
        rollback("old stopped: rollback_s (status)", "rollback_stopped_machine_ms", False),
        rollback("old stopped: command -> first answer from old",
                 "rollback_stopped_first_old_answer_ms", False),
        figure("answers", f"failed or short answers of {answered:,}", [float(failed)], "",
               target="= 0", op="<=", limit=0.0),
    ]
