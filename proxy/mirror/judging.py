"""The gate verdict: store aggregates -> `proxy.gate.verdict.evaluate`, off the event loop.

Evaluation runs on the store's thread (aggregating rows and ranking latency
samples take milliseconds to a second on a full store); the admin endpoint
calls it on demand and a background loop refreshes the verdict gauge. The answer is a
typed `GateResult` all the way to the cutover (across the capture worker's channel too);
`GateResult.as_json` writes the admin API's JSON.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from proxy.evidence.aggregates import VERSION_ROLES, PairCounts, RoleCounts
from proxy.evidence.store import RecordStore, SqliteStore, StoreAggregates
from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria, Verdict, evaluate
from proxy.metrics import ProxyMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowFacts:
    """One cutover's evidence: its window, the records in it, each version's outcomes."""

    window: EvidenceWindow
    records: int
    versions: Mapping[str, RoleCounts]  # "old" / "new" (`VERSION_ROLES`) -> its counts


@dataclass(frozen=True)
class GateResult:
    """The gate over the store: the verdict, the comparisons it counted (new against old,
    and the baseline's), and over a cutover's window, that window's facts."""

    verdict: Verdict
    shadow: PairCounts
    baseline: PairCounts | None  # None: no baseline comparison recorded
    window: WindowFacts | None = None  # None: over every record kept

    def as_json(self) -> dict[str, Any]:
        """What the admin API answers (keys in this order)."""
        base = self.baseline
        result = {**self.verdict.to_dict(),
                  "baseline": None if base is None else {"compared": base.compared,
                                                         "diverged": base.diverged},
                  "compared": self.shadow.compared, "diverged": self.shadow.diverged}
        if self.window is not None:
            result |= {"window": asdict(self.window.window), "records": self.window.records,
                       "versions": {version: asdict(counts)
                                    for version, counts in self.window.versions.items()}}
        return result


def _evaluate(store: SqliteStore, criteria: GateCriteria,
              until_unix: float | None = None) -> GateResult:
    return _judge(store.aggregates(until_unix=until_unix), criteria)


def judge_window(store: SqliteStore, criteria: GateCriteria, window: EvidenceWindow,
                 until_unix: float | None = None) -> GateResult:
    """The verdict over one cutover's evidence only, with its counts labelled by version
    (old/new), whichever of them is primary now; of the records started before
    `until_unix` when given (`Mirror.judged_until`: none still out is left behind)."""
    aggregates = store.aggregates(window=window, until_unix=until_unix)
    versions = {version: aggregates.roles[role]
                for version, role in VERSION_ROLES.items() if role in aggregates.roles}
    return _judge(aggregates, criteria, WindowFacts(window, aggregates.records, versions))


async def window_verdict(store: RecordStore, criteria: GateCriteria, window: EvidenceWindow,
                         judged_until: Callable[[], float]) -> GateResult:
    """`judge_window` on the store's thread, with the cutoff `judged_until()`."""
    return await store.call(judge_window, criteria, window,
                            await _cutoff(store, judged_until))


def evaluate_window(store: SqliteStore, criteria: GateCriteria,
                    window: EvidenceWindow) -> dict[str, Any]:
    """`judge_window` as the admin API writes it."""
    return judge_window(store, criteria, window).as_json()


def _judge(aggregates: StoreAggregates, criteria: GateCriteria,
           window: WindowFacts | None = None) -> GateResult:
    return GateResult(evaluate(aggregates.gate_inputs(), criteria), aggregates.shadow,
                      aggregates.baseline, window)


async def _cutoff(store: RecordStore, judged_until: Callable[[], float] | None) -> float | None:
    """`judged_until()`, once every record queued before it is in the database: an
    exchange stops holding the cutoff when its record is queued, not written."""
    if judged_until is None:
        return None
    until, accepted = judged_until(), store.accepted
    if not await store.settle(accepted):
        log.warning("records queued before a gate look were not written within 5 s; "
                    "judging without them")
    return until


async def current_verdict(store: RecordStore, criteria: GateCriteria, metrics: ProxyMetrics,
                          judged_until: Callable[[], float] | None = None) -> GateResult:
    """The verdict over every record kept (of those started before `judged_until()`:
    `Mirror.judged_until`); sets the verdict gauge."""
    result = await store.call(_evaluate, criteria, await _cutoff(store, judged_until))
    verdict = result.verdict
    metrics.set_verdict(verdict.verdict, [check.as_json() for check in verdict.checks])
    return result


async def refresh_verdict_forever(store: RecordStore, criteria: GateCriteria,
                                  metrics: ProxyMetrics, every_s: float,
                                  judged_until: Callable[[], float] | None = None) -> None:
    """Keep the verdict gauge current (only when new records arrived); cancelled at shutdown."""
    seen = store.written  # the app evaluated once at startup
    while True:
        await asyncio.sleep(every_s)
        if store.written == seen:
            continue
        seen = store.written
        try:
            await current_verdict(store, criteria, metrics, judged_until)
        except Exception:  # the gauge may go stale, the proxy must not stop
            log.exception("could not evaluate the gate")
