"""One mirrored request from start to record, and the `Mirror` that starts them.

The handler asks `Mirror.start()` for an `Exchange` (None when not sampled or
over the in-flight cap); the exchange starts the shadow/baseline requests at
once as background tasks, taps the primary's relayed chunks into a
CaptureBuilder, and when the primary is done hands everything to a background
`finalize` task: wait for the mirrors, get comparable token ids, compare, then
record to the store and the metrics. The handler never awaits any of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Mapping
from time import perf_counter

import aiohttp
from multidict import CIMultiDict

from proxy.compare.capture import CaptureBuilder
from proxy.compare.diff import compare
from proxy.compare.request import PreparedRequest
from proxy.compare.types import Capture, ExchangeRecord, Role
from proxy.metrics import ProxyMetrics
from proxy.mirror.config import MirrorConfig
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.routing import Routes, Upstream
from proxy.mirror.shadow import Sampler, fetch_capture, tokenize
from proxy.mirror.tasks import BackgroundTasks
from proxy.store import RecordStore

log = logging.getLogger(__name__)

TokenSource = str  # "client" | "tokenize" | "backend" | "none"


class Mirror:
    """Per-application mirroring state: sampler, in-flight count, collaborators."""

    def __init__(self, config: MirrorConfig, tasks: BackgroundTasks, metrics: ProxyMetrics,
                 store: RecordStore | None) -> None:
        self.config = config
        self.sampler = Sampler(config.sample_rate, config.sample_header)
        self.tasks = tasks
        self.metrics = metrics
        self.store = store
        self.inflight = 0
        self.tokenize_slots = asyncio.Semaphore(config.tokenize_concurrency)
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()

    def wants(self, routes: Routes, headers: Mapping[str, str]) -> bool:
        """Cheap pre-check before the body is parsed: a shadow exists and the sampler says yes."""
        return routes.shadow is not None and self.sampler.sample(headers)

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str],
              prepared: PreparedRequest) -> Exchange | None:
        """Begin mirroring `prepared` unless over the in-flight cap (then count the drop)."""
        if self.inflight >= self.config.max_shadow_inflight or self.tasks.closing:
            self.metrics.shadow_dropped.labels("inflight_cap").inc()
            return None
        exchange = Exchange(self, routes, f"{self._id_prefix}-{next(self._ids)}", prepared)
        exchange.launch(path, headers)
        return exchange


class Exchange:
    """The captures of one mirrored request, finished off the client path."""

    def __init__(self, mirror: Mirror, routes: Routes, request_id: str,
                 prepared: PreparedRequest) -> None:
        self.mirror = mirror
        self.routes = routes
        self.request_id = request_id
        self.meta = prepared.meta
        self.shadow_body = prepared.shadow_body
        self.started_unix = time.time()
        self.primary_label = mirror.metrics.backend_label(routes.primary.url)
        self.builder = CaptureBuilder("primary", self.primary_label, perf_counter())
        self.others: list[tuple[Role, Upstream, asyncio.Task[Capture]]] = []
        self.auth: CIMultiDict[str] = CIMultiDict()
        self._held: list[Upstream] = [routes.primary.acquire()]

    def launch(self, path: str, headers: CIMultiDict[str]) -> None:
        mirror = self.mirror
        mirror.inflight += 1
        mirror.metrics.shadow_inflight.inc()
        auth = headers.get("Authorization")
        if auth is not None:
            self.auth["Authorization"] = auth
        self.auth["Content-Type"] = "application/json"
        sides: tuple[tuple[Role, Upstream | None], ...] = (
            ("shadow", self.routes.shadow), ("baseline", self.routes.baseline))
        for role, upstream in sides:
            if upstream is None:
                continue
            self._held.append(upstream.acquire())
            label = mirror.metrics.backend_label(upstream.url)
            coro = fetch_capture(upstream, role, label, path, headers, self.shadow_body,
                                 mirror.config.shadow_timeout_s)
            task = mirror.tasks.spawn(coro, f"{role}-{self.request_id}")
            if task is not None:
                self.others.append((role, upstream, task))
                mirror.metrics.mirrored.labels(role).inc()

    def tap_for(self, response: aiohttp.ClientResponse) -> ChunkTap:
        """Where the primary's relayed chunks go (SSE decoder or JSON body)."""
        if response.content_type == "text/event-stream":
            return self.builder.on_chunk
        return self.builder.on_body

    def primary_done(self, result: RelayResult) -> None:
        """Called by the handler in `finally`: freeze the primary capture, finish off-path."""
        t_end = result.t_end or perf_counter()
        error = result.error or ("capture_failed" if result.capture_failed else None)
        primary = self.builder.finish(result.status, t_end, error=error,
                                      cancelled=result.cancelled)
        if result.cancelled:
            for _, _, task in self.others:
                task.cancel()
        if self.mirror.tasks.spawn(self.finalize(primary), f"finalize-{self.request_id}") is None:
            self._release()

    def _release(self) -> None:
        for upstream in self._held:
            upstream.release()
        self._held = []
        self.mirror.inflight -= 1
        self.mirror.metrics.shadow_inflight.dec()

    async def finalize(self, primary: Capture) -> None:
        try:
            others = [(role, await task) for role, _, task in self.others]
            source, primary, others = await self._token_ids(primary, others)
            self._record(primary, others, source)
        finally:
            self._release()

    async def _token_ids(
        self, primary: Capture, others: list[tuple[Role, Capture]]
    ) -> tuple[TokenSource, Capture, list[tuple[Role, Capture]]]:
        """Comparable ids for both sides (see docs/TOKEN_IDS.md)."""
        if primary.token_ids is not None:
            return "client", primary, others
        usable = [c for _, c in others if c.error is None and not c.cancelled]
        if (not self.meta.deterministic or primary.error is not None or primary.cancelled
                or not usable):
            return "none", primary, others
        texts = {primary.text} | {c.text for c in usable}
        ids = await self._tokenize_all(texts)
        if ids is None:
            return "none", primary, others
        primary = dataclasses.replace(primary, token_ids=ids[primary.text])
        others = [
            (role, dataclasses.replace(c, token_ids=ids[c.text])
             if c.error is None and not c.cancelled else c)
            for role, c in others
        ]
        return "tokenize", primary, others

    async def _tokenize_all(self, texts: set[str]) -> dict[str, tuple[int, ...]] | None:
        """Token ids of every distinct text from the primary's /tokenize (one tokenizer)."""
        out: dict[str, tuple[int, ...]] = {}
        timeout_s = self.mirror.config.tokenize_timeout_s
        async with self.mirror.tokenize_slots:
            for text in texts:
                ids = await tokenize(self.routes.primary, text, self.auth, timeout_s) \
                    if text else ()
                if ids is None:
                    return None
                out[text] = ids
        return out

    def _record(self, primary: Capture, others: list[tuple[Role, Capture]],
                source: TokenSource) -> None:
        metrics = self.mirror.metrics
        meta = self.meta
        comparisons = tuple(compare(primary, other, meta, role) for role, other in others)
        endpoint = meta.endpoint
        metrics.observe_capture(primary, endpoint, count_request=False)
        for _, other in others:
            metrics.observe_capture(other, endpoint)
        if primary.cancelled:
            metrics.cancelled.inc()
        metrics.observe_comparisons(comparisons, meta.deterministic)
        metrics.token_id_source.labels(source).inc()
        record = ExchangeRecord(
            request_id=self.request_id, started_unix=self.started_unix, meta=meta,
            captures=(primary, *(c for _, c in others)), comparisons=comparisons,
            extra={"token_ids_source": source, "route_version": self.routes.version},
        )
        if self.mirror.store is not None:
            self.mirror.store.put(record)

