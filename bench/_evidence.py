"""How much evidence each mirroring path kept, round by round: a relay that is fast because
it drops mirrors has not won.

Per run of a mirroring path: the answers the shadow backend sent to their end (the inline
backend counts them, `/_bench/answers`) and, for the proxy, its comparisons against the
shadow, each per client request completed in that run. A run's count reaches from the
mark before its load to the mark before the next tracked run (or the end), so mirrors
still in flight when its window closed count for it; the bench orders the paths so that
runs of other paths, which send the shadow nothing, sit in between.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from _common import merge
from _figures import Figure, figure
from _load import LoadResult, LoadSpec, run_load
from _paths import Server, backend_answers, mirror_counters

COMPARED = tuple(
    f'vllm_cutover_comparisons_total{{against="shadow",deterministic="true",outcome="{outcome}"}}'
    for outcome in ("match", "diverged"))
SETTLE_S = 1.0  # before the last mark: the last run's mirrors finish


@dataclass
class _Run:
    label: str
    answers: float  # the shadow's answers sent whole, at the mark before this run
    compared: float  # the proxy's comparisons against the shadow, same moment
    completed: int = 0  # client requests completed in this run


class MirrorShares:
    """Marks before each load run; shares per tracked label, one per round."""

    def __init__(self, shadow: Server | None, proxy: Server | None,
                 tracked: tuple[str, ...]) -> None:
        self.shadow = shadow
        self.proxy = proxy
        self.tracked = tracked
        self.runs: list[_Run] = []
        self._end: tuple[float, float] | None = None

    def _sample(self) -> tuple[float, float]:
        answers = backend_answers(self.shadow) if self.shadow is not None else math.nan
        compared = math.nan
        if self.proxy is not None:
            counters = mirror_counters(self.proxy)
            if counters is not None:
                compared = sum(counters.get(name, 0.0) for name in COMPARED)
        return answers, compared

    def before(self, label: str) -> None:
        if label in self.tracked:
            self.runs.append(_Run(label, *self._sample()))

    def after(self, label: str, completed: int) -> None:
        if label in self.tracked and self.runs:
            self.runs[-1].completed = completed

    def finish(self) -> None:
        """The last mark, once the last tracked run's mirrors had time to end."""
        if self.runs:
            time.sleep(SETTLE_S)
            self._end = self._sample()

    def shares(self) -> dict[str, dict[str, list[float]]]:
        """{label: {"answers": [per round], "compared": [per round]}}."""
        out: dict[str, dict[str, list[float]]] = {}
        marks = [(r.answers, r.compared) for r in self.runs[1:]]
        marks.append(self._end if self._end is not None else (math.nan, math.nan))
        for run, (answers, compared) in zip(self.runs, marks):
            per = out.setdefault(run.label, {"answers": [], "compared": []})
            requests = run.completed or math.nan
            per["answers"].append((answers - run.answers) / requests)
            per["compared"].append((compared - run.compared) / requests)
        return out

    def figures(self, scenario: str, where: str = "") -> list[Figure]:
        out = []
        for label, per in self.shares().items():
            if not all(math.isnan(v) for v in per["answers"]):
                out.append(figure(scenario, f"{label}{where}: shadow answers sent whole, per "
                                  "client request", per["answers"], "x"))
            if label == "proxy" and not all(math.isnan(v) for v in per["compared"]):
                out.append(figure(scenario, f"proxy{where}: mirrors compared, per client "
                                  "request", per["compared"], "x"))
        return out


def counted_run(shares: MirrorShares, path: str, spec: LoadSpec, into: LoadResult,
                on_window: Callable[[str], None] | None = None) -> LoadResult:
    """One load run of `path`, its mirror shares marked around it, merged `into` the
    path's results; the run's own result."""
    shares.before(path)
    result = run_load(spec, on_window=on_window)
    shares.after(path, result.completed)
    merge(into, result)
    return result
