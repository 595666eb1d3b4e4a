"""What the cutover asks of the proxy it runs in: routes, requests in flight, the gate.

A Protocol, so the state machine's tests step it against a fake; the proxy's
implementation (`proxy.mirror.control`) acts on its own router and evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol


class RouteConflict(RuntimeError):
    """The routes changed since the version the caller read (compare-and-set failed)."""


@dataclass(frozen=True)
class RoutesView:
    version: int
    primary: str
    shadow: str | None = None
    baseline: str | None = None


@dataclass(frozen=True)
class EvidenceWindow:
    """The records that count for one cutover: started at or after `since_unix`, between
    exactly these two versions (whichever of them was primary). `old_url`/`new_url`
    label the roles by version, so after promotion (new is primary, old is shadow) the
    comparison is still new against old."""

    since_unix: float
    old_url: str
    new_url: str
    baseline_url: str | None = None


@dataclass(frozen=True)
class GateView:
    verdict: Literal["pass", "fail", "inconclusive"]
    reasons: tuple[str, ...] = ()
    samples: int = 0  # new-vs-old comparisons counted
    min_samples: int = 0
    details: Mapping[str, object] = field(default_factory=dict)


class ProxyControl(Protocol):
    def routes(self) -> RoutesView: ...

    def set_routes(self, primary: str, shadow: str | None, baseline: str | None,
                   expect_version: int) -> RoutesView:
        """Publish new routes atomically (requests in flight finish where they started);
        RouteConflict when the current version is not `expect_version`."""

    def inflight(self) -> Mapping[str, int]:
        """Requests in flight per backend URL (client requests and mirrors)."""

    async def gate(self, window: EvidenceWindow) -> GateView:
        """The verdict over the records of `window` only."""
