"""Which sampled requests get mirrored, and the count of those that were not.

`Admission` decides on the client path with only cheap bookkeeping (the sampler, the
in-flight cap, the proxy's own overload: `proxy.mirror.load`); the in-process `Mirror`
and the capture worker's client `RemoteMirror` each hold one (`MirrorFront`: what the
client path calls) and add their own checks. Every request the
sampler chose is counted as eligible, every one not mirrored as shed with its reason, in
the metrics and in an `AdmissionTally` that is flushed to the record store, so the gate
and the report know the share of traffic their verdict stands on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from multidict import CIMultiDict

from proxy.capture.types import Endpoint
from proxy.gate.tally import ELIGIBLE, AdmissionRow
from proxy.metrics import ProxyMetrics
from proxy.mirror.config import MirrorConfig
from proxy.mirror.load import LoopLoad, overloaded
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.shadow import Sampler
from proxy.mirror.upstream.routing import Routes

FLUSH_EVERY_S = 1.0


class ExchangeHandle(Protocol):
    """What the client path holds of a mirrored request."""

    def tap_for(self, content_type: str) -> ChunkTap: ...

    def primary_done(self, result: RelayResult) -> None: ...


class AdmissionTally:
    """Eligible and shed counts per (primary, shadow, outcome) since the last `take`."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}

    def count(self, primary: str, shadow: str, outcome: str, n: int = 1) -> None:
        key = (primary, shadow, outcome)
        self._counts[key] = self._counts.get(key, 0) + n

    def take(self) -> list[AdmissionRow]:
        """The counts so far (then zero)."""
        rows = [(*key, n) for key, n in self._counts.items()]
        self._counts = {}
        return rows

    def give_back(self, rows: list[AdmissionRow]) -> None:
        """Counts that could not be delivered: they go out with the next flush."""
        for primary, shadow, outcome, n in rows:
            self.count(primary, shadow, outcome, n)


class Admission:
    """The sampler, the in-flight cap and overload shedding, with the counts they make
    (`inflight`: the exchanges its holder has started and not yet finished)."""

    def __init__(self, config: MirrorConfig, metrics: ProxyMetrics) -> None:
        self.config = config
        self.sampler = Sampler(config.sample_rate, config.sample_header)
        self.metrics = metrics
        self.inflight = 0
        self.load = LoopLoad()  # the proxy's own loop (kept current by load.watch())
        self.tally = AdmissionTally()

    def wants(self, routes: Routes, headers: Mapping[str, str]) -> bool:
        """Cheap pre-check before the body is parsed: a shadow exists and the sampler says
        yes (then the request is eligible: from here it is either mirrored or shed)."""
        shadow = routes.shadow
        if shadow is None or not self.sampler.sample(headers):
            return False
        self.tally.count(routes.primary.url, shadow.url, ELIGIBLE)
        self.metrics.sampled.inc()
        return True

    def shed(self, routes: Routes, reason: str, n: int = 1) -> None:
        """Count `n` eligible requests of `routes` not mirrored, for `reason`."""
        self.metrics.shadow_dropped.labels(reason).inc(n)
        shadow = routes.shadow
        self.tally.count(routes.primary.url, shadow.url if shadow is not None else "", reason, n)

    def admit(self, routes: Routes, closing: bool) -> bool:
        """False (and the request counted as shed) when over the in-flight cap or overloaded."""
        config = self.config
        if self.inflight >= config.max_shadow_inflight or closing:
            self.shed(routes, "inflight_cap")
            return False
        load = self.load
        if overloaded(load.lag_s, load.busy, config.overload_lag_s, config.overload_busy):
            self.shed(routes, "overload")
            return False
        return True



class MirrorFront(Protocol):
    """What the client path holds: the in-process `Mirror` or the worker's `RemoteMirror`."""

    admission: Admission

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str],
              request: dict[str, Any], endpoint: Endpoint) -> ExchangeHandle | None:
        """Begin mirroring one request (None: not mirrored, and why is counted)."""
        ...

    def flush_admission(self) -> None:
        """Hand the counts so far to the record store (where the gate reads them)."""
        ...


async def flush_admission_forever(front: MirrorFront, every_s: float = FLUSH_EVERY_S) -> None:
    while True:
        await asyncio.sleep(every_s)
        front.flush_admission()
