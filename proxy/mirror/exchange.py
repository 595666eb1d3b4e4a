"""One mirrored request from start to record, and the `Mirror` that starts them.

The handler asks `Mirror.start()` for an `Exchange` (None when not sampled or
over the in-flight cap); the exchange starts the shadow/baseline requests at
once as background tasks, taps the primary's relayed chunks into a
CaptureBuilder, and when the primary is done hands everything to a background
`finalize` task: wait for the mirrors, get comparable token ids, compare, then
record to the store and the metrics (those the fleet gate reads in start order:
`proxy.mirror.start_order`). The handler never awaits any of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import os
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any

from multidict import CIMultiDict

from proxy.capture.builder import CaptureBuilder
from proxy.capture.request import PreparedRequest, json_bytes, prepare
from proxy.capture.types import Capture, Endpoint, RequestMeta, Role
from proxy.compare import token_ids
from proxy.compare.diff import compare
from proxy.compare.types import ExchangeRecord, RouteStamp, TokenSource
from proxy.credentials import without_credentials
from proxy.evidence.store import RecordStore
from proxy.metrics import ProxyMetrics
from proxy.mirror.admission import Admission
from proxy.mirror.config import MirrorConfig
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.shadow import fetch_capture, mirror_headers, tokenize
from proxy.mirror.start_order import FORCED_LOG_EVERY_S, StartOrderHold, slim
from proxy.mirror.upstream.routing import Routes, Upstream
from proxy.tasks import BackgroundTasks

log = logging.getLogger(__name__)



def unstreamed(prepared: PreparedRequest) -> bytes:
    """The shadow's request without streaming."""
    request = dict(prepared.request)
    if prepared.meta.endpoint != "responses":
        request["return_token_ids"] = True
    request["stream"] = False
    request.pop("stream_options", None)
    return json_bytes(request)


class Mirror:
    """In-process mirroring: admission, plus the collaborators every `Exchange` uses."""

    def __init__(self, config: MirrorConfig, tasks: BackgroundTasks, metrics: ProxyMetrics,
                 store: RecordStore | None, evidence_in_start_order: bool = True) -> None:
        self.config = config
        self.metrics = metrics
        self.admission = Admission(config, metrics)
        self.tasks = tasks
        self.store = store
        self.tokenize_slots = asyncio.Semaphore(config.tokenize_concurrency)
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()
        # The start time and shadow URL of every exchange not yet recorded (by request
        # id), and the newest cutoff given out for each shadow (`judged_until`).
        self.open_starts: dict[str, tuple[float, str | None]] = {}
        self._until: dict[str | None, float] = {}
        self.newest_start = time.time()  # records kept from before were complete then
        # Records not yet counted in the metrics (None: counted as they end, where no
        # fleet gate reads the metrics: a tune race's own registry).
        self.evidence_hold = StartOrderHold() if evidence_in_start_order else None
        self._forced_logged = -math.inf  # when the hold's limit was last logged

    def judged_until(self, shadow: str | None = None) -> float:
        """The cutoff the gate may judge before: every exchange started earlier (to
        `shadow` only, when given) has been recorded or dropped. Records are written when
        an exchange ends, so judging every record written would judge the quick answers
        while a slow or hung one is still out: a version that hangs until the shadow
        timeout on some requests would pass on its survivors. With none out, just after
        the newest start seen (not the clock: a start the relay has sent and this process
        not yet read is later than every one it has read). Never moves back."""
        shadow = without_credentials(shadow) if shadow is not None else None
        oldest = min((started for started, url in self.open_starts.values()
                      if shadow is None or url == shadow),
                     default=math.nextafter(self.newest_start, math.inf))
        until = self._until[shadow] = max(self._until.get(shadow, 0.0), oldest)
        return until

    def count_evidence(self, record: ExchangeRecord) -> None:
        """Count `record` in the comparison and evidence metrics once every exchange that
        started before it has ended (`proxy.mirror.start_order`)."""
        hold = self.evidence_hold
        if hold is None:
            self._observe([record])
            return
        forced = hold.hold(slim(record))
        if forced:
            self._observe(forced)
            now = time.monotonic()
            if now - self._forced_logged >= FORCED_LOG_EVERY_S:
                self._forced_logged = now
                log.warning("evidence metrics: %d records held behind an exchange still "
                            "out (the limit): the oldest are counted before it ends",
                            hold.limit)

    def release_evidence(self) -> None:
        """Count the held records the cutoff has passed (after an exchange ends)."""
        hold = self.evidence_hold
        if hold is not None and len(hold):
            self._observe(hold.release(self.judged_until()))

    def _observe(self, records: list[ExchangeRecord]) -> None:
        for record in records:
            self.metrics.observe_comparisons(record.comparisons, record.meta.deterministic)
            self.metrics.evidence.observe(record)

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str],
              request: dict[str, Any], endpoint: Endpoint, *, admitted: bool = False,
              started: tuple[float, float] | None = None) -> Exchange | None:
        """Begin mirroring unless over the in-flight cap (then count the drop).

        `request` is the body as `read_request` read it. Only cheap bookkeeping happens
        here; what the mirrored requests send is built in a task, after the primary request has gone out. `admitted`: the
        caller already decided (the capture worker); `started`: (time.time(),
        perf_counter()) of the client's request when it arrived elsewhere.
        """
        if not admitted and not self.admission.admit(routes, self.tasks.closing):
            return None
        if self.tasks.closing:
            return None
        exchange = Exchange(self, routes, f"{self._id_prefix}-{next(self._ids)}", started)
        exchange.launch(path, headers, request, endpoint)
        return exchange

    def flush_admission(self) -> None:
        rows = self.admission.tally.take()
        if rows and self.store is not None:
            self.store.add_admission(time.time(), rows)


class Exchange:
    """The captures of one mirrored request, finished off the client path."""

    def __init__(self, mirror: Mirror, routes: Routes, request_id: str,
                 started: tuple[float, float] | None = None) -> None:
        self.mirror = mirror
        self.routes = routes
        self.request_id = request_id
        self.meta: RequestMeta | None = None  # set once the body is parsed (off-path)
        self.started_unix, t_start = started if started is not None \
            else (time.time(), perf_counter())
        self.primary_label = mirror.metrics.backend_label(routes.primary.url)
        self.builder = CaptureBuilder("primary", self.primary_label, t_start)
        self.on_done: Callable[[], None] | None = None  # called once everything is recorded
        self.on_record: Callable[[ExchangeRecord], None] | None = None  # a tune's race
        self.others: list[tuple[Role, asyncio.Future[Capture]]] = []
        self.auth: CIMultiDict[str] = CIMultiDict()
        self._held: list[Upstream] = [routes.primary.acquire()]
        self._starter: asyncio.Task[None] | None = None
        self.request_json: str | None = None  # kept only when the store keeps text

    def launch(self, path: str, headers: CIMultiDict[str], request: dict[str, Any],
               endpoint: Endpoint) -> None:
        mirror = self.mirror
        mirror.admission.inflight += 1
        mirror.open_starts[self.request_id] = (
            self.started_unix, self.routes.shadow.url if self.routes.shadow else None)
        mirror.newest_start = max(mirror.newest_start, self.started_unix)
        mirror.metrics.shadow_inflight.inc()
        auth = headers.get("Authorization")
        if auth is not None:
            self.auth["Authorization"] = auth
        self.auth["Content-Type"] = "application/json"
        for upstream in (self.routes.shadow, self.routes.baseline):
            if upstream is not None:
                self._held.append(upstream.acquire())
        self._starter = mirror.tasks.spawn(self._start(path, headers, request, endpoint),
                                           f"mirror-{self.request_id}")

    async def _start(self, path: str, headers: CIMultiDict[str], request: dict[str, Any],
                     endpoint: Endpoint) -> None:
        """Build and send the mirrored requests (no await: runs whole or never)."""
        mirror = self.mirror
        prepared = prepare(request, endpoint)
        if prepared is None:
            mirror.metrics.shadow_dropped.labels("malformed_json").inc()
            return
        self.meta = prepared.meta
        store = mirror.store
        if store is not None and store.sync.store_text:
            # The operator asked for text: the request then replays (`eval record --records`).
            self.request_json = json_bytes(request).decode("utf-8", "replace")
        headers = mirror_headers(headers)
        sides: tuple[tuple[Role, Upstream | None], ...] = (
            ("shadow", self.routes.shadow), ("baseline", self.routes.baseline))
        for role, upstream in sides:
            if upstream is None:
                continue
            label = mirror.metrics.backend_label(upstream.url)
            if upstream.pool.down:
                # Refused (or unconfirmed) moments ago: recorded as such, without a task
                # or a syscall.
                self._lost(role, label, upstream.pool.down_kind, f"{role}_down")
                continue
            try:
                body = prepared.shadow_body
                if role == "baseline" and self.meta.stream and not mirror.config.baseline_stream:
                    body = unstreamed(prepared)
            except Exception as exc:  # noqa: BLE001 - a lost mirror is data, never silent
                if upstream.should_warn():
                    log.warning("%s %s: request not mirrored: %s: %s", role, upstream.url,
                                type(exc).__name__, exc)
                self._lost(role, label, "internal", f"{role}_internal")
                continue
            coro = fetch_capture(upstream, role, label, path, headers, body,
                                 mirror.config.shadow_timeout_s,
                                 mirror.config.max_shadow_answer_bytes)
            task = mirror.tasks.spawn(coro, f"{role}-{self.request_id}")
            if task is None:
                self._lost(role, label, "shutdown", f"{role}_shutdown")
                continue
            self.others.append((role, task))
            mirror.metrics.mirrored.labels(role).inc()

    def _lost(self, role: Role, label: str, error: str, reason: str) -> None:
        """A side that was not sent: recorded as failed with `error`, counted as `reason`."""
        t = perf_counter()
        done: asyncio.Future[Capture] = asyncio.get_running_loop().create_future()
        done.set_result(CaptureBuilder(role, label, t).finish(None, t, error=error))
        self.others.append((role, done))
        self.mirror.metrics.shadow_dropped.labels(reason).inc()

    def tap_for(self, content_type: str) -> ChunkTap:
        """Where the primary's relayed chunks go (SSE decoder or JSON body)."""
        if content_type == "text/event-stream":
            return self.builder.on_chunk
        return self.builder.on_body

    def primary_done(self, result: RelayResult) -> None:
        """Called by the handler in `finally`: freeze the primary capture, finish off-path."""
        t_end = result.t_end or perf_counter()
        error = result.error or ("capture_failed" if result.capture_failed else None)
        primary = self.builder.finish(result.status, t_end, error=error,
                                      cancelled=result.cancelled)
        if result.cancelled:
            if self._starter is not None:
                self._starter.cancel()
            for _, task in self.others:
                task.cancel()
        if self.mirror.tasks.spawn(self.finalize(primary), f"finalize-{self.request_id}") is None:
            self._release()

    def _release(self) -> None:
        for upstream in self._held:
            upstream.release()
        self._held = []
        self.mirror.admission.inflight -= 1
        self.mirror.open_starts.pop(self.request_id, None)
        self.mirror.release_evidence()
        self.mirror.metrics.shadow_inflight.dec()
        if self.on_done is not None:
            self.on_done()

    async def finalize(self, primary: Capture) -> None:
        try:
            if self._starter is not None:
                await asyncio.wait([self._starter])
            if self.meta is None:  # malformed body, or the client left before the start
                return
            others = [(role, await task) for role, task in self.others]
            source, primary, others = await self._token_ids(primary, others)
            self._record(self.meta, primary, others, source)
        finally:
            self._release()

    async def _token_ids(
        self, primary: Capture, others: list[tuple[Role, Capture]]
    ) -> tuple[TokenSource, Capture, list[tuple[Role, Capture]]]:
        """Comparable ids for both sides: decided by `proxy.compare.token_ids`, the texts
        it asks for tokenized on the primary (see docs/TOKEN_IDS.md)."""
        chosen = token_ids.plan(self.meta, primary, others)
        ids = await self._tokenize_all(set(chosen.texts)) if chosen.texts else None
        return token_ids.apply(chosen, others, ids)

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

    def _record(self, meta: RequestMeta, primary: Capture, others: list[tuple[Role, Capture]],
                source: TokenSource) -> None:
        metrics = self.mirror.metrics
        comparisons = tuple(compare(primary, other, meta, role) for role, other in others)
        endpoint = meta.endpoint
        metrics.observe_capture(primary, endpoint, count_request=False)
        for _, other in others:
            metrics.observe_capture(other, endpoint)
        if primary.cancelled:
            metrics.cancelled.inc()
        metrics.token_id_source.labels(source).inc()
        urls = self.routes.urls()
        record = ExchangeRecord(
            request_id=self.request_id, started_unix=self.started_unix, meta=meta,
            captures=(primary, *(c for _, c in others)), comparisons=comparisons,
            token_ids_source=source,
            routes=RouteStamp(self.routes.version, str(urls["primary"]), urls["shadow"],
                              urls["baseline"]),
            baseline_streamed=meta.stream and self.mirror.config.baseline_stream,
        )
        self.mirror.count_evidence(record)
        if self.on_record is not None:
            self.on_record(record)
        if self.mirror.store is not None:  # the client's body only to the store, if asked
            self.mirror.store.put(record if self.request_json is None
                                  else dataclasses.replace(record, request_json=self.request_json))

