"""The proxy's side of mirroring through the capture worker (`proxy.mirror.worker.link` runs it).

The client path only samples, counts and appends the primary's relayed bytes to
a list (`RemoteExchange`); every `FLUSH_BYTES` and at the end they go to the
worker in one message. Everything else a mirrored request costs runs in the
worker process (`proxy.mirror.worker`). While the worker is behind (what it was
sent waits too long: `proxy.mirror.load.WorkerBacklog`), new requests are not
mirrored. If the worker dies, the proxy goes on relaying: the exchanges it had
are counted as dropped, new ones too while it is down, and it is started again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from itertools import count
from time import perf_counter
from typing import Any

from multidict import CIMultiDict

from proxy.capture.types import Endpoint
from proxy.metrics import ProxyMetrics
from proxy.mirror.admission import Admission
from proxy.mirror.config import ProxyConfig
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.upstream.routing import Routes, Upstream
from proxy.mirror.worker.link import WorkerLink
from proxy.mirror.worker.messages import AdmissionCounts, Chunks, End, Start

log = logging.getLogger(__name__)

FLUSH_BYTES = 32 * 1024  # the primary's bytes held per request before they go to the worker


class RemoteExchange:
    """One mirrored request on the client path: its primary's bytes, held briefly.

    Its "start" message goes out on the loop's next turn, after the primary's request
    has been written, so the IPC is not in that request's time to first token; any later
    message sends it first if it is still pending, so the worker always sees it first.
    """

    __slots__ = ("content_type", "gone", "held", "link", "payloads", "routes", "size", "start",
                 "times", "xid")

    def __init__(self, link: WorkerLink, xid: int, routes: Routes, held: list[Upstream],
                 start: Start) -> None:
        self.link = link
        self.xid = xid
        self.routes = routes
        self.held = held
        self.start: Start | None = start
        self.gone = False  # ended, or lost with the worker: nothing more to send
        self.content_type = ""
        self.payloads: list[bytes] = []
        self.times: list[float] = []
        self.size = 0

    def send_start(self) -> None:
        start = self.start
        if start is not None:
            self.start = None
            self.link.send(start)  # a closed channel: connection_lost drops the exchange

    def tap_for(self, content_type: str) -> ChunkTap:
        self.content_type = content_type
        return self._tap

    def _tap(self, payload: bytes, t: float) -> None:
        if self.gone:
            return
        self.payloads.append(payload)
        self.times.append(t)
        self.size += len(payload)
        if self.size >= FLUSH_BYTES:
            self.send_start()
            self.link.send(Chunks(self.xid, self.content_type, self.payloads, self.times))
            self.payloads, self.times, self.size = [], [], 0

    def primary_done(self, result: RelayResult) -> None:
        if self.gone:  # the worker that had it went away (a new one never heard of it)
            return
        self.send_start()
        error = result.error or ("capture_failed" if result.capture_failed else None)
        self.link.send(End(self.xid, self.content_type, self.payloads, self.times,
                           result.status, error, result.cancelled,
                           result.t_end or perf_counter()))
        self.payloads, self.times = [], []


class RemoteMirror:
    """Admission on the client path; the exchanges themselves run in the capture worker."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics,
                 cpus: tuple[int, ...] | None = None,
                 confirm_peer: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self.config = config.mirror
        self.metrics = metrics
        self.admission = Admission(config.mirror, metrics)
        self.link = WorkerLink(config, self._done, self._lost, cpus, confirm_peer)
        self.exchanges: dict[int, RemoteExchange] = {}
        self._xids = count(1)
        self.closing = False

    async def open(self) -> None:
        await self.link.start()

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str],
              request: dict[str, Any], endpoint: Endpoint) -> RemoteExchange | None:
        admission = self.admission
        if not admission.admit(routes, self.closing):
            return None
        link = self.link
        if not link.ready:
            admission.shed(routes, "worker_down")
            return None
        if link.behind(self.config.max_worker_delay_s):
            admission.shed(routes, "worker_busy")
            return None
        xid = next(self._xids)
        shadow, baseline = routes.shadow, routes.baseline
        # The worker opens its own pools: it gets the URLs as configured (credentials too).
        start = Start(xid, routes.version, routes.primary.target,
                      shadow.target if shadow is not None else None,
                      baseline.target if baseline is not None else None,
                      path, list(headers.items()), request, endpoint, time.time(), perf_counter())
        held = [u.acquire() for u in (routes.primary, shadow, baseline) if u is not None]
        exchange = self.exchanges[xid] = RemoteExchange(link, xid, routes, held, start)
        admission.inflight += 1
        self.metrics.shadow_inflight.inc()
        asyncio.get_running_loop().call_soon(exchange.send_start)
        return exchange

    def _done(self, xid: int) -> None:
        exchange = self.exchanges.pop(xid, None)
        if exchange is None:
            return
        exchange.gone = True
        exchange.start = None
        for upstream in exchange.held:
            upstream.release()
        self.admission.inflight -= 1
        self.metrics.shadow_inflight.dec()

    def _lost(self) -> None:
        """The worker went away: what it had will never be recorded."""
        lost = list(self.exchanges.values())
        for exchange in lost:
            self._done(exchange.xid)
            if not self.closing:
                self.admission.shed(exchange.routes, "worker_lost")

    def flush_admission(self) -> None:
        tally = self.admission.tally
        rows = tally.take()
        if rows and not self.link.send(AdmissionCounts(time.time(), rows)):
            tally.give_back(rows)  # the worker is down: with the next flush

    async def close(self, drain_timeout_s: float) -> int:
        self.closing = True
        self.flush_admission()
        return await self.link.stop(drain_timeout_s)
