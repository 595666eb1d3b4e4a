"""What the cutover asks of the proxy it runs in: routes, requests in flight, the gate.

A Protocol, so the state machine's tests step it against a fake; the proxy's
implementation (`proxy.mirror.control`) acts on its own router and evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from proxy.evidence.window import EvidenceWindow
from proxy.gate.checks import Check


class RouteConflict(RuntimeError):
    """The routes changed since the version the caller read (compare-and-set failed)."""


@dataclass(frozen=True)
class RoutesView:
    version: int
    primary: str
    shadow: str | None = None
    baseline: str | None = None


@dataclass(frozen=True)
class GateView:
    """The gate as the cutover reads it: the verdict, its reasons and its checks (most
    severe first; each inconclusive one says what it needs, `Check.need`)."""

    verdict: Literal["pass", "fail", "inconclusive"]
    reasons: tuple[str, ...] = ()
    samples: int = 0  # new-vs-old comparisons counted
    min_samples: int = 0
    checks: tuple[Check, ...] = ()


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
