"""What the admin API reads (gate, aggregates, records, metrics), wherever it lives.

In-process mode the store and the metrics are the proxy's own; with a capture
worker they live in the worker and every read is a call to it, whose answer the
proxy's own metrics are merged into. Before each read the proxy's admission counts
(eligible, shed) are flushed to the store, so the answer includes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from proxy.evidence.store import RecordStore, SqliteStore, records_page
from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria
from proxy.metrics import ProxyMetrics, merge_expositions
from proxy.mirror.judging import GateResult, current_verdict, window_verdict
from proxy.mirror.worker.link import WorkerLink, WorkerUnavailable
from proxy.mirror.worker.messages import (
    AggregatesQuery,
    GateQuery,
    MetricsQuery,
    RecordsQuery,
    WindowGateQuery,
)


class Evidence(Protocol):
    async def gate(self) -> GateResult: ...

    async def window_gate(self, window: EvidenceWindow) -> GateResult:
        """The verdict over one cutover's evidence (`verdict.judge_window`)."""

    async def aggregates(self) -> dict[str, Any]: ...

    async def records(self, after_id: int, limit: int) -> list[dict[str, Any]]: ...

    async def metrics(self) -> bytes: ...


class LocalEvidence:
    """The proxy's own store and metrics (in-process mode)."""

    def __init__(self, store: RecordStore, criteria: GateCriteria, metrics: ProxyMetrics,
                 flush: Callable[[], None], judged_until: Callable[[], float]) -> None:
        self.store = store
        self.criteria = criteria
        self._metrics = metrics
        self._flush = flush
        self._judged_until = judged_until  # `Mirror.judged_until`

    async def gate(self) -> GateResult:
        self._flush()
        return await current_verdict(self.store, self.criteria, self._metrics,
                                     self._judged_until)

    async def window_gate(self, window: EvidenceWindow) -> GateResult:
        return await window_verdict(self.store, self.criteria, window, self._judged_until)

    async def aggregates(self) -> dict[str, Any]:
        self._flush()
        return {**(await self.store.call(SqliteStore.aggregates)).as_json(),
                "records_dropped": dict(self.store.dropped)}

    async def records(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        return await self.store.call(records_page, after_id, limit)

    async def metrics(self) -> bytes:
        return self._metrics.render()


class WorkerEvidence:
    """Everything asked of the capture worker; raises WorkerUnavailable when it can't answer."""

    def __init__(self, link: WorkerLink, metrics: ProxyMetrics,
                 flush: Callable[[], None]) -> None:
        self.link = link
        self._metrics = metrics
        self._flush = flush

    async def gate(self) -> GateResult:
        self._flush()  # the channel is ordered: the worker stores the counts first
        return await self.link.ask(GateQuery(), GateResult)

    async def window_gate(self, window: EvidenceWindow) -> GateResult:
        return await self.link.ask(WindowGateQuery(window), GateResult)

    async def aggregates(self) -> dict[str, Any]:
        self._flush()
        return await self.link.ask(AggregatesQuery(), dict)

    async def records(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        return await self.link.ask(RecordsQuery(after_id, limit), list)

    async def metrics(self) -> bytes:
        own = self._metrics.render()
        try:
            worker = await self.link.ask(MetricsQuery(), bytes, timeout_s=10.0)
        except WorkerUnavailable:  # scrapes go on; the worker's series come back with it
            return own
        return merge_expositions(own, worker)
