"""The gate verdict: store aggregates -> `proxy.compare.gate.evaluate`, off the event loop.

Evaluation runs on the store's thread (aggregating rows and ranking latency
samples take milliseconds to a second on a full store); the admin endpoint
calls it on demand and a background loop refreshes the verdict gauge.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import Any

from proxy.aggregates import VERSION_ROLES
from proxy.compare.gate import GateCriteria, evaluate
from proxy.cutover.control import EvidenceWindow
from proxy.metrics import ProxyMetrics
from proxy.store import RecordStore, SqliteStore, StoreAggregates

log = logging.getLogger(__name__)


def _evaluate(store: SqliteStore, criteria: GateCriteria) -> dict[str, Any]:
    return _judge(store.aggregates(), criteria)


def evaluate_window(store: SqliteStore, criteria: GateCriteria,
                    window: EvidenceWindow) -> dict[str, Any]:
    """The verdict over one cutover's evidence only, with its counts labelled by version
    (old/new), whichever of them is primary now."""
    aggregates = store.aggregates(window=window)
    result = _judge(aggregates, criteria)
    result["window"] = asdict(window)
    result["records"] = aggregates.records
    result["versions"] = {version: asdict(aggregates.roles[role])
                          for version, role in VERSION_ROLES.items() if role in aggregates.roles}
    return result


def _judge(aggregates: StoreAggregates, criteria: GateCriteria) -> dict[str, Any]:
    result = evaluate(aggregates.gate_inputs(), criteria).to_dict()
    result["baseline"] = (
        {"compared": aggregates.baseline.compared, "diverged": aggregates.baseline.diverged}
        if aggregates.baseline is not None else None)
    result["compared"] = aggregates.shadow.compared
    result["diverged"] = aggregates.shadow.diverged
    return result


async def current_verdict(store: RecordStore, criteria: GateCriteria,
                          metrics: ProxyMetrics) -> dict[str, Any]:
    """{"verdict", "reasons", "samples", "details", "compared", "diverged", "baseline"}."""
    result = await store.call(_evaluate, criteria)
    checks = result.get("details", {}).get("checks", ())
    metrics.set_verdict(result["verdict"], checks if isinstance(checks, list) else ())
    return result


async def refresh_verdict_forever(store: RecordStore, criteria: GateCriteria,
                                  metrics: ProxyMetrics, every_s: float) -> None:
    """Keep the verdict gauge current (only when new records arrived); cancelled at shutdown."""
    seen = store.written  # the app evaluated once at startup
    while True:
        await asyncio.sleep(every_s)
        if store.written == seen:
            continue
        seen = store.written
        try:
            await current_verdict(store, criteria, metrics)
        except Exception:  # the gauge may go stale, the proxy must not stop
            log.exception("could not evaluate the gate")
