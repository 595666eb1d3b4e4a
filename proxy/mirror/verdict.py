"""The gate verdict served on /admin/gate, computed from the store's aggregates."""

from __future__ import annotations

from typing import Any

from proxy.mirror.config import ProxyConfig
from proxy.store import StoreAggregates


def evaluate_gate(aggregates: StoreAggregates, config: ProxyConfig) -> dict[str, Any]:
    """{"verdict", "reasons", "samples", ...} for the current evidence."""
    return {
        "verdict": "inconclusive",
        "reasons": ["gate criteria not wired yet"],
        "samples": aggregates.shadow.compared,
    }
