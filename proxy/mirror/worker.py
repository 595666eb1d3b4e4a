"""The capture worker: mirrors, captures, compares and records, in its own process.

`vllm-cutover proxy` starts it (`proxy.mirror.remote`) so that what a mirrored
request costs beyond relaying it (two more answers received and parsed, the
primary's stream parsed, the comparison, SQLite, the statistics of the gate) runs
under another GIL than the client path, at a lower priority (nice 10 by default),
and on other CPUs when `--worker-cpus` gives them. It runs the same
`Mirror`/`Exchange` code as the in-process mode; the proxy sends it each sampled
request, the primary's relayed bytes with their arrival times, and how the
primary's answer ended. perf_counter is the system's monotonic clock, so times
taken in either process compare.

Messages (tuples, the kind first). Proxy -> worker:
  ("config", ProxyConfig, log_level)                   first, once
  ("start", xid, route_version, primary, shadow, baseline, path, headers, body,
   endpoint, started_unix, t_start)
  ("chunks", xid, content_type, payloads, times)      the primary's bytes so far
  ("end", xid, content_type, payloads, times, status, error, cancelled, t_end)
  ("admission", t_unix, rows)                          eligible and shed counts (store)
  ("call", call_id, name, args)                       gate | aggregates | records | metrics
                                                      | window_gate (a cutover's evidence)
  ("shutdown",)
Worker -> proxy: ("ready", scheduling, bytes handled), ("done", xid), ("reply", call_id, ok, value), ("bye", n),
  ("progress", bytes handled, loop lag s, loop busy) every PROGRESS_REPORT_S.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Coroutine
from typing import Any

from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from proxy.compare.stats import mann_whitney
from proxy.compare.types import Endpoint
from proxy.credentials import install_log_redaction
from proxy.eventloop import run_fast
from proxy.metrics import ProxyMetrics
from proxy.mirror.collector import pace_garbage_collection
from proxy.mirror.config import ProxyConfig, RouteConfig
from proxy.mirror.exchange import Exchange, Mirror
from proxy.mirror.ipc import Channel
from proxy.mirror.load import LoopLoad
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.routing import Router, Routes, make_session_factory
from proxy.mirror.tasks import BackgroundTasks
from proxy.mirror.verdict import current_verdict, evaluate_window, refresh_verdict_forever
from proxy.store import RecordStore, SqliteStore, records_page

log = logging.getLogger(__name__)

LOST_PARENT_DRAIN_S = 5.0  # the proxy died: finish what is in flight, briefly
PROGRESS_REPORT_S = 0.2  # how often the worker tells the proxy how far it has got
NO_CAP = 1 << 30  # the proxy already applied the in-flight cap and the overload shedding
NICE = 10  # --worker-priority nice: a tenth of a nice-0 process's CPU share when both want it


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
        sync = SqliteStore(config.store.db_path, config.store.retention_rows,
                           config.store.store_text)
        self.store = RecordStore(sync, on_drop=self.metrics.records_dropped.inc)
        self.router = Router(config.routes, make_session_factory(config.connect_timeout_s))
        mirror_config = dataclasses.replace(config.mirror, max_shadow_inflight=NO_CAP,
                                            overload_lag_s=0.0)
        self.mirror = Mirror(mirror_config, self.tasks, self.metrics, self.store)
        self.pending: dict[int, _Pending] = {}
        self.load = LoopLoad()
        self._routes: tuple[tuple[object, ...], Routes] | None = None
        self._helpers: list[asyncio.Task[None]] = []
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stopping = False

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self.store.start()
        mann_whitney([1.0, 2.0], [2.0, 3.0])  # load scipy now, not mid-traffic
        await current_verdict(self.store, self.config.gate, self.metrics)
        gc.collect()
        gc.freeze()
        self._helpers = [
            loop.create_task(refresh_verdict_forever(self.store, self.config.gate, self.metrics,
                                                     self.config.gate_refresh_s),
                             name="verdict-refresh"),
            loop.create_task(pace_garbage_collection(), name="gc-pacer"),
            loop.create_task(self.load.watch(), name="loop-load"),
            loop.create_task(self._report_progress(), name="progress-report"),
        ]
        self.channel.send(("ready", self.scheduling, self.channel.handled_bytes))

    async def _report_progress(self) -> None:
        """Tell the proxy how much of what it sent is handled, so it sheds mirrors while
        this worker is behind (its queue would grow without bound), and how its loop does
        (for /admin/stats)."""
        while True:
            await asyncio.sleep(PROGRESS_REPORT_S)
            self.channel.send(("progress", self.channel.handled_bytes, self.load.lag_s,
                               self.load.busy))

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "chunks":
            pending = self.pending.get(message[1])
            if pending is not None:
                pending.feed(message[2], message[3], message[4])
        elif kind == "start":
            self._start(*message[1:])
        elif kind == "end":
            self._end(*message[1:])
        elif kind == "admission":
            self.store.add_admission(message[1], message[2])
        elif kind == "call":
            self._call(message[1], message[2], message[3])
        elif kind == "shutdown":
            self.stop(self.config.drain_timeout_s)
        else:
            log.error("unknown message %r from the proxy", kind)

    def _routes_for(self, version: int, primary: str, shadow: str | None,
                    baseline: str | None) -> Routes:
        key = (version, primary, shadow, baseline)
        if self._routes is None or self._routes[0] != key:
            routes = self.router.snapshot(RouteConfig(primary, shadow, baseline), version)
            self._routes = (key, routes)
        return self._routes[1]

    def _start(self, xid: int, version: int, primary: str, shadow: str | None,
               baseline: str | None, path: str, headers: list[tuple[str, str]], body: bytes,
               endpoint: Endpoint, started_unix: float, t_start: float) -> None:
        routes = self._routes_for(version, primary, shadow, baseline)
        exchange = self.mirror.start(routes, path, CIMultiDict(headers), body, endpoint,
                                     admitted=True, started=(started_unix, t_start))
        if exchange is None:  # shutting down
            self.channel.send(("done", xid))
            return
        exchange.on_done = lambda: self._done(xid)
        self.pending[xid] = _Pending(exchange)

    def _done(self, xid: int) -> None:
        self.channel.send(("done", xid))

    def _end(self, xid: int, content_type: str, payloads: list[bytes], times: list[float],
             status: int | None, error: str | None, cancelled: bool, t_end: float) -> None:
        pending = self.pending.pop(xid, None)
        if pending is None:
            self.channel.send(("done", xid))
            return
        pending.feed(content_type, payloads, times)
        result = RelayResult(status=status, error=error, cancelled=cancelled,
                             capture_failed=pending.failed, t_end=t_end)
        pending.exchange.primary_done(result)

    def _call(self, call_id: int, name: str, args: tuple[Any, ...]) -> None:
        async def answer(work: Coroutine[Any, Any, Any]) -> None:
            try:
                value = await work
            except Exception as exc:  # the caller gets the error, the worker goes on
                log.exception("admin call %s failed", name)
                self.channel.send(("reply", call_id, False, f"{type(exc).__name__}: {exc}"))
                return
            self.channel.send(("reply", call_id, True, value))

        work = self._work(name, args)
        if work is None:
            self.channel.send(("reply", call_id, False, f"unknown call {name!r}"))
            return
        asyncio.get_running_loop().create_task(answer(work), name=f"call-{name}")

    def _work(self, name: str, args: tuple[Any, ...]) -> Coroutine[Any, Any, Any] | None:
        if name == "gate":
            return current_verdict(self.store, self.config.gate, self.metrics)
        if name == "window_gate":
            return self.store.call(evaluate_window, self.config.gate, *args)
        if name == "aggregates":
            return self._aggregates()
        if name == "records":
            return self.store.call(records_page, *args)
        if name == "metrics":
            return self._metrics()
        return None

    async def _aggregates(self) -> dict[str, Any]:
        aggregates = await self.store.call(SqliteStore.aggregates)
        return aggregates.as_json()

    async def _metrics(self) -> bytes:
        return self.metrics.render()

    def stop(self, drain_timeout_s: float) -> None:
        if self._stopping:
            return
        self._stopping = True
        asyncio.get_running_loop().create_task(self._shutdown(drain_timeout_s), name="shutdown")

    async def _shutdown(self, drain_timeout_s: float) -> None:
        # Exchanges whose end never came (the proxy died mid-request) end as cancelled.
        for xid in list(self.pending):
            self._end(xid, "", [], [], None, None, True, 0.0)
        cancelled = await self.tasks.drain(drain_timeout_s)
        for helper in self._helpers:
            helper.cancel()
        await asyncio.gather(*self._helpers, return_exceptions=True)
        await self.router.close()
        await self.store.close()
        self.channel.send(("bye", cancelled))
        self.channel.close()
        if not self.stopped.done():
            self.stopped.set_result(None)


async def serve(sock: socket.socket, scheduling: str = "normal") -> None:
    """Answer the proxy on `sock` until it says shutdown or goes away."""
    loop = asyncio.get_running_loop()
    worker: CaptureWorker | None = None
    lost: asyncio.Future[None] = loop.create_future()
    opening: list[asyncio.Task[None]] = []

    def on_message(message: tuple[Any, ...]) -> None:
        nonlocal worker
        if worker is not None:
            worker.handle(message)
        elif message[0] == "config":
            config, level = message[1], message[2]
            logging.basicConfig(
                level=level, format="%(asctime)s %(levelname)s capture-worker %(name)s: %(message)s")
            install_log_redaction()
            worker = CaptureWorker(config, channel, scheduling)
            opening.append(loop.create_task(worker.open(), name="open"))

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


def lower_priority(priority: str) -> str:
    """Yield the CPU to the relay: capture must not delay a client.

    nice: nice 10, a tenth of the CPU share of a nice-0 process (the relay, the engines)
    when both want it, but never nothing: on a host whose CPUs vLLM's processes keep
    busy the worker still keeps up with light traffic. idle: Linux SCHED_IDLE, only CPU
    time nothing else wants; there the worker falls behind and the proxy sheds mirrors.
    """
    if priority == "nice":
        os.nice(NICE)
        return f"nice {NICE}"
    if priority == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "SCHED_IDLE"
        except (AttributeError, OSError):  # not Linux
            os.nice(19)
            return "nice 19"
    return "normal"


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


if __name__ == "__main__":
    sys.exit(main())
