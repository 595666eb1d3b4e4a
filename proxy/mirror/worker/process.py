"""The capture worker: mirrors, captures, compares and records, in its own process.

`vllm-cutover proxy` starts it (`proxy.mirror.worker.remote`) so that what a mirrored
request costs beyond relaying it (two more answers received and parsed, the
primary's stream parsed, the comparison, SQLite, the statistics of the gate) runs
under another GIL than the client path, at a lower priority (nice 10 by default),
and on other CPUs when `--worker-cpus` gives them. It runs the same
`Mirror`/`Exchange` code as the in-process mode; the proxy sends it each sampled
request, the primary's relayed bytes with their arrival times, and how the
primary's answer ended. perf_counter is the system's monotonic clock, so times
taken in either process compare.

Messages (`proxy.mirror.worker.messages`). Proxy -> worker: `Configure` first and once,
then per mirrored request `Start`, `Chunks` (the primary's bytes so far) and `End`;
`AdmissionCounts`, `Call` (a `Query`) and `Shutdown`. Worker -> proxy: `Ready`,
`Done` per request, `Reply` per call, `Progress` every PROGRESS_REPORT_S, `Bye`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import signal
import socket
from collections.abc import Callable, Coroutine
from itertools import count
from typing import Any

from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from proxy.credentials import install_log_redaction
from proxy.eventloop import run_fast
from proxy.evidence.store import RecordStore, SqliteStore, records_page
from proxy.gate.stats import mann_whitney
from proxy.metrics import ProxyMetrics
from proxy.mirror.collector import pace_garbage_collection
from proxy.mirror.config import ProxyConfig, RouteConfig
from proxy.mirror.exchange import Exchange, Mirror
from proxy.mirror.judging import current_verdict, refresh_verdict_forever, window_verdict
from proxy.mirror.load import LoopLoad
from proxy.mirror.memory import release_memory_forever
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.upstream.routing import Router, Routes, make_pool_factory
from proxy.mirror.worker.ipc import Channel
from proxy.mirror.worker.messages import (
    SCHEMA,
    AdmissionCounts,
    AggregatesQuery,
    Bye,
    Call,
    Chunks,
    Configure,
    ConfirmPeer,
    Done,
    End,
    GateQuery,
    MetricsQuery,
    PeerConfirmed,
    Progress,
    Query,
    Ready,
    RecordsQuery,
    Reply,
    ReplyValue,
    Shutdown,
    Start,
    WindowGateQuery,
)
from proxy.mirror.worker.priority import lower_priority
from proxy.tasks import BackgroundTasks, cancel_all, start_task

log = logging.getLogger(__name__)

LOST_PARENT_DRAIN_S = 5.0  # the proxy died: finish what is in flight, briefly
PROGRESS_REPORT_S = 0.2  # how often the worker tells the proxy how far it has got
NO_CAP = 1 << 30  # the proxy already applied the in-flight cap and the overload shedding


class _Pending:
    """A started exchange waiting for the primary's bytes and end."""

    __slots__ = ("exchange", "failed", "tap")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.tap: ChunkTap | None = None
        self.failed = False

    def feed(self, content_type: str, payloads: list[bytes], times: list[float]) -> None:
        if self.failed or not payloads:
            return
        tap = self.tap
        if tap is None:
            tap = self.tap = self.exchange.tap_for(content_type)
        try:
            for payload, t in zip(payloads, times):
                tap(payload, t)
        except Exception:  # a capture bug must not lose the record: it says capture_failed
            log.exception("capture failed; the record will say so")
            self.failed = True


class CaptureWorker:
    """The worker's state, built from the proxy's configuration."""

    def __init__(self, config: ProxyConfig, channel: Channel, scheduling: str) -> None:
        self.config = config
        self.channel = channel
        self.scheduling = scheduling  # what lower_priority() got, for the proxy's log
        self.metrics = ProxyMetrics(CollectorRegistry())
        self.tasks = BackgroundTasks()
        self.answers = BackgroundTasks()  # calls are answered during the drain too
        sync = SqliteStore(config.store.db_path, config.store.retention_rows,
                           config.store.store_text)
        self.store = RecordStore(sync, on_drop=self.metrics.drop_records)
        self._peer_calls: dict[int, asyncio.Future[str | None]] = {}
        self._peer_ids = count(1)
        pools = make_pool_factory(config.connect_timeout_s, config.max_upstream_connections,
                                  confirm=self._confirm_peer)
        self.router = Router(config.routes, pools)
        mirror_config = dataclasses.replace(config.mirror, max_shadow_inflight=NO_CAP,
                                            overload_lag_s=0.0)
        self.mirror = Mirror(mirror_config, self.tasks, self.metrics, self.store)
        self.pending: dict[int, _Pending] = {}
        self.load = LoopLoad()
        self._routes: tuple[tuple[object, ...], Routes] | None = None
        self._helpers: list[asyncio.Task[None]] = []
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stopping: asyncio.Task[None] | None = None
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            Chunks: self._chunks, Start: self._start, End: self._end,
            AdmissionCounts: self._admission, Call: self._call, Shutdown: self._shutdown_asked,
            PeerConfirmed: self._peer_confirmed,
        }

    async def open(self) -> None:
        self.store.start()
        mann_whitney([1.0, 2.0], [2.0, 3.0])  # load scipy now, not mid-traffic
        await current_verdict(self.store, self.config.gate, self.metrics)
        gc.collect()
        gc.freeze()
        self._helpers = [
            start_task(refresh_verdict_forever(self.store, self.config.gate, self.metrics,
                                               self.config.gate_refresh_s,
                                               self.mirror.judged_until), "verdict-refresh"),
            start_task(pace_garbage_collection(), "gc-pacer"),
            start_task(release_memory_forever(), "memory-release"),
            start_task(self.load.watch(), "loop-load"),
            start_task(self._report_progress(), "progress-report"),
        ]
        self.channel.send(Ready(self.scheduling, self.channel.handled_bytes))

    async def _report_progress(self) -> None:
        """Tell the proxy how much of what it sent is handled, so it sheds mirrors while
        this worker is behind (its queue would grow without bound), and how its loop does
        (for /admin/stats)."""
        while True:
            await asyncio.sleep(PROGRESS_REPORT_S)
            self.channel.send(Progress(self.channel.handled_bytes, self.load.lag_s,
                                       self.load.busy))

    def handle(self, message: object) -> None:
        handler = self._handlers.get(type(message))
        if handler is None:
            log.error("unexpected %s from the proxy", type(message).__name__)
            return
        handler(message)

    async def _confirm_peer(self, url: str) -> str | None:
        """Whether a new connection to `url` may carry prompts: the proxy's cutover knows
        the container behind it (`proxy.mirror.peers`); the pool times the answer out."""
        call_id = next(self._peer_ids)
        future = self._peer_calls[call_id] = asyncio.get_running_loop().create_future()
        try:
            if not self.channel.send(ConfirmPeer(call_id, url)):
                return "the proxy cannot be asked (its channel is closed)"
            return await future
        finally:
            self._peer_calls.pop(call_id, None)

    def _peer_confirmed(self, answer: PeerConfirmed) -> None:
        future = self._peer_calls.get(answer.call_id)
        if future is not None and not future.done():
            future.set_result(answer.refusal)

    def _chunks(self, chunks: Chunks) -> None:
        pending = self.pending.get(chunks.xid)
        if pending is not None:
            pending.feed(chunks.content_type, chunks.payloads, chunks.times)

    def _admission(self, counts: AdmissionCounts) -> None:
        self.store.add_admission(counts.t_unix, counts.rows)

    def _shutdown_asked(self, _: Shutdown) -> None:
        self.stop(self.config.drain_timeout_s)

    def _routes_for(self, version: int, primary: str, shadow: str | None,
                    baseline: str | None) -> Routes:
        key = (version, primary, shadow, baseline)
        if self._routes is None or self._routes[0] != key:
            routes = self.router.snapshot(RouteConfig(primary, shadow, baseline), version)
            self._routes = (key, routes)
        return self._routes[1]

    def _start(self, start: Start) -> None:
        routes = self._routes_for(start.route_version, start.primary, start.shadow,
                                  start.baseline)
        exchange = self.mirror.start(routes, start.path, CIMultiDict(start.headers),
                                     start.request,
                                     start.endpoint, admitted=True,
                                     started=(start.started_unix, start.t_start))
        xid = start.xid
        if exchange is None:  # shutting down
            self.channel.send(Done(xid))
            return
        exchange.on_done = lambda: self._done(xid)
        self.pending[xid] = _Pending(exchange)

    def _done(self, xid: int) -> None:
        self.channel.send(Done(xid))

    def _end(self, end: End) -> None:
        pending = self.pending.pop(end.xid, None)
        if pending is None:
            self.channel.send(Done(end.xid))
            return
        pending.feed(end.content_type, end.payloads, end.times)
        result = RelayResult(status=end.status, error=end.error, cancelled=end.cancelled,
                             capture_failed=pending.failed, t_end=end.t_end)
        pending.exchange.primary_done(result)

    def _call(self, call: Call) -> None:
        name = type(call.query).__name__

        async def answer(work: Coroutine[Any, Any, ReplyValue]) -> None:
            try:
                value = await work
            except Exception as exc:  # the caller gets the error, the worker goes on
                log.exception("admin call %s failed", name)
                self.channel.send(Reply(call.call_id, False, f"{type(exc).__name__}: {exc}"))
                return
            self.channel.send(Reply(call.call_id, True, value))

        work = self._work(call.query)
        if work is None:
            self.channel.send(Reply(call.call_id, False, f"unknown call {name}"))
            return
        self.answers.spawn(answer(work), f"call-{name}")

    def _work(self, query: Query) -> Coroutine[Any, Any, ReplyValue] | None:
        if isinstance(query, GateQuery):
            return current_verdict(self.store, self.config.gate, self.metrics,
                                   self.mirror.judged_until)
        if isinstance(query, WindowGateQuery):
            return window_verdict(self.store, self.config.gate, query.window,
                                  self.mirror.judged_until)
        if isinstance(query, AggregatesQuery):
            return self._aggregates()
        if isinstance(query, RecordsQuery):
            return self.store.call(records_page, query.after_id, query.limit)
        if isinstance(query, MetricsQuery):
            return self._metrics()
        return None

    async def _aggregates(self) -> dict[str, Any]:
        aggregates = await self.store.call(SqliteStore.aggregates)
        return {**aggregates.as_json(), "records_dropped": dict(self.store.dropped)}

    async def _metrics(self) -> bytes:
        return self.metrics.render()

    def stop(self, drain_timeout_s: float) -> None:
        if self._stopping is None:
            self._stopping = start_task(self._shutdown(drain_timeout_s), "shutdown")

    async def _shutdown(self, drain_timeout_s: float) -> None:
        # Exchanges whose end never came (the proxy died mid-request) end as cancelled.
        for xid in list(self.pending):
            self._end(End(xid, content_type="", payloads=[], times=[], status=None, error=None,
                          cancelled=True, t_end=0.0))
        cancelled = await self.tasks.drain(drain_timeout_s)
        await cancel_all(self._helpers)
        await self.router.close()
        await self.store.close()
        await self.answers.drain(1.0)
        self.channel.send(Bye(cancelled))
        self.channel.close()
        if not self.stopped.done():
            self.stopped.set_result(None)


async def serve(sock: socket.socket, scheduling: str = "normal") -> None:
    """Answer the proxy on `sock` until it says shutdown or goes away."""
    loop = asyncio.get_running_loop()
    worker: CaptureWorker | None = None
    lost: asyncio.Future[None] = loop.create_future()
    opening: list[asyncio.Task[None]] = []

    def on_message(message: object) -> None:
        nonlocal worker
        if worker is not None:
            worker.handle(message)
        elif isinstance(message, Configure):
            logging.basicConfig(level=message.log_level, format="%(asctime)s %(levelname)s "
                                "capture-worker %(name)s: %(message)s")
            install_log_redaction()
            if message.schema != SCHEMA:
                log.error("the proxy speaks message schema %s, this worker %s: they run "
                          "different code; exiting", message.schema, SCHEMA)
                channel.close()
                return
            worker = CaptureWorker(message.config, channel, scheduling)
            opening.append(start_task(worker.open(), "open"))

    def on_lost(exc: Exception | None) -> None:
        if not lost.done():
            lost.set_result(None)

    channel = Channel(on_message, on_lost)  # frames may arrive during the connect itself
    await loop.create_unix_connection(lambda: channel, sock=sock)
    await lost
    if opening:
        await asyncio.gather(*opening, return_exceptions=True)
    if worker is not None:
        worker.stop(LOST_PARENT_DRAIN_S)  # no-op after a shutdown message
        await worker.stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="vllm-cutover's capture worker (started by `vllm-cutover proxy`)")
    parser.add_argument("--fd", type=int, required=True,
                        help="inherited socket to the proxy (one end of a socketpair)")
    parser.add_argument("--priority", choices=("nice", "idle", "normal"), default="nice",
                        help="nice 10 (default), SCHED_IDLE, or unchanged")
    args = parser.parse_args(argv)
    # The proxy decides when to stop (it drains first, then says shutdown); a terminal's
    # Ctrl-C or a group SIGTERM must not kill the records in flight here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    scheduling = lower_priority(args.priority)
    sock = socket.socket(fileno=args.fd)
    run_fast(serve(sock, scheduling))
    return 0

