"""The proxy's side of the capture worker: start it, feed it, ask it, restart it.

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
import os
import socket
import sys
import time
from collections.abc import Callable
from itertools import count
from time import perf_counter
from typing import Any

from multidict import CIMultiDict

import proxy
from proxy.compare.types import Endpoint
from proxy.metrics import ProxyMetrics
from proxy.mirror.admission import Admission
from proxy.mirror.config import ProxyConfig
from proxy.mirror.ipc import Channel
from proxy.mirror.load import LoopLoad, WorkerBacklog
from proxy.mirror.messages import (
    SCHEMA,
    AdmissionCounts,
    Bye,
    Call,
    Chunks,
    Configure,
    Done,
    End,
    Progress,
    Query,
    Ready,
    Reply,
    Shutdown,
    Start,
)
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.routing import Routes, Upstream
from proxy.tasks import start_task

log = logging.getLogger(__name__)

FLUSH_BYTES = 32 * 1024  # the primary's bytes held per request before they go to the worker
MAX_CHANNEL_BYTES = 64 * 1024 * 1024  # worker this far behind: new requests are not mirrored
READY_TIMEOUT_S = 120.0
RESTART_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class WorkerUnavailable(RuntimeError):
    """The capture worker is not running (starting again) or did not answer."""


class WorkerLink:
    """The worker process and the channel to it."""

    def __init__(self, config: ProxyConfig, on_done: Callable[[int], None],
                 on_lost: Callable[[], None], cpus: tuple[int, ...] | None = None) -> None:
        self.config = config
        self.cpus = cpus
        self._on_done = on_done
        self._on_lost_exchanges = on_lost
        self.channel: Channel | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.ready = False
        self.restarts = 0
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._call_ids = count(1)
        self._ready: asyncio.Future[None] | None = None
        self._bye: asyncio.Future[int] | None = None
        self._stopping = False
        self._restarter: asyncio.Task[None] | None = None
        self.backlog = WorkerBacklog()
        self.load = LoopLoad()  # the worker's loop, as it last reported it
        self.scheduling = ""  # as the worker reports it: nice 10, SCHED_IDLE or normal

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the worker and wait until it is ready (its imports take a second or two)."""
        loop = asyncio.get_running_loop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The worker must run this very code, whatever the installed copy is.
        root = os.path.dirname(os.path.dirname(os.path.abspath(proxy.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "proxy.mirror.worker", "--fd", str(child.fileno()),
                "--priority", self.config.worker_priority,
                pass_fds=(child.fileno(),), env=env, stdin=asyncio.subprocess.DEVNULL)
        finally:
            child.close()
        if self.cpus:
            try:
                os.sched_setaffinity(self.process.pid, self.cpus)
            except OSError as exc:
                log.warning("capture worker: cannot pin to CPUs %s: %s", self.cpus, exc)
        self._ready = loop.create_future()
        self._bye = loop.create_future()
        self.backlog.reset()
        self.load = LoopLoad()
        channel = self.channel = Channel(self._message, self._lost)
        await loop.create_unix_connection(lambda: channel, sock=parent)
        self._send(Configure(SCHEMA, self.config, logging.getLogger().getEffectiveLevel()))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.process.kill()
            raise WorkerUnavailable(f"capture worker not ready in {READY_TIMEOUT_S:.0f} s") \
                from None
        self.ready = True
        log.info("capture worker started (pid %d, %s, CPUs %s)", self.process.pid,
                 self.scheduling, ",".join(map(str, self.cpus)) if self.cpus else "inherited")

    def send(self, message: object) -> bool:
        return self.ready and self._send(message)

    def _send(self, message: object) -> bool:
        channel = self.channel
        size = channel.send(message) if channel is not None else 0
        if size:
            self.backlog.sent(size, time.monotonic())
        return size > 0

    def behind(self, max_delay_s: float) -> bool:
        """What the worker was sent has waited over `max_delay_s` (or piles up)."""
        return self.backlog.behind(time.monotonic(), max_delay_s, MAX_CHANNEL_BYTES)

    async def call(self, query: Query, timeout_s: float = 60.0) -> Any:
        """Ask the worker (gate, aggregates, records, metrics); WorkerUnavailable if it can't."""
        if not self.ready:
            raise WorkerUnavailable("the capture worker is not running (restarting)")
        call_id = next(self._call_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        try:
            if not self.send(Call(call_id, query)):
                raise WorkerUnavailable("the capture worker is not running (restarting)")
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            raise WorkerUnavailable(f"the capture worker did not answer {type(query).__name__} in "
                                    f"{timeout_s:.0f} s") from None
        finally:
            self._calls.pop(call_id, None)

    def _message(self, message: object) -> None:
        if isinstance(message, Done):
            self._on_done(message.xid)
        elif isinstance(message, Reply):
            future = self._calls.get(message.call_id)
            if future is not None and not future.done():
                if message.ok:
                    future.set_result(message.value)
                else:
                    future.set_exception(RuntimeError(message.value))
        elif isinstance(message, Progress):
            self.backlog.handled(message.handled_bytes)
            self.load.lag_s, self.load.busy = message.loop_lag_s, message.loop_busy
        elif isinstance(message, Ready):
            self.scheduling = message.scheduling
            self.backlog.handled(message.handled_bytes)
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(message, Bye):
            if self._bye is not None and not self._bye.done():
                self._bye.set_result(message.cancelled)
        else:
            log.error("capture worker sent an unexpected %s", type(message).__name__)

    def _lost(self, exc: Exception | None) -> None:
        self.ready = False
        for future in self._calls.values():
            if not future.done():
                future.set_exception(WorkerUnavailable("the capture worker went away"))
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerUnavailable("the capture worker exited at start"))
        if self._bye is not None and not self._bye.done():
            self._bye.set_result(-1)
        self._on_lost_exchanges()
        if self._stopping:
            return
        log.error("capture worker (pid %s) exited unexpectedly; mirroring pauses until it "
                  "is started again", self.pid)
        self._restarter = start_task(self._restart(), "worker-restart")

    async def _restart(self) -> None:
        if self.process is not None:
            await self.process.wait()
        for delay in (*RESTART_DELAYS_S, *[RESTART_DELAYS_S[-1]] * 1000):
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self.start()
            except (OSError, WorkerUnavailable) as exc:
                log.error("capture worker: restart failed: %s", exc)
                continue
            self.restarts += 1
            return

    async def stop(self, timeout_s: float) -> int:
        """Ask the worker to finish its exchanges and records, wait for it; its cancel count."""
        self._stopping = True
        if self._restarter is not None:
            self._restarter.cancel()
        process, channel = self.process, self.channel
        if process is None:
            return 0
        cancelled = 0
        if channel is not None and self.ready and self._send(Shutdown()) \
                and self._bye is not None:
            try:
                cancelled = await asyncio.wait_for(asyncio.shield(self._bye), timeout_s + 10.0)
            except asyncio.TimeoutError:
                log.error("capture worker did not finish in %.0f s; killing it", timeout_s + 10)
        if channel is not None:
            channel.close()
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
        return cancelled


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


class RemoteMirror(Admission):
    """Admission on the client path; the exchanges themselves run in the capture worker."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics,
                 cpus: tuple[int, ...] | None = None) -> None:
        super().__init__(config.mirror, metrics)
        self.link = WorkerLink(config, self._done, self._lost, cpus)
        self.exchanges: dict[int, RemoteExchange] = {}
        self._xids = count(1)
        self.closing = False

    async def open(self) -> None:
        await self.link.start()

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str], body: bytes,
              endpoint: Endpoint) -> RemoteExchange | None:
        if not self.admit(routes, self.closing):
            return None
        link = self.link
        if not link.ready:
            self.shed(routes, "worker_down")
            return None
        if link.behind(self.config.max_worker_delay_s):
            self.shed(routes, "worker_busy")
            return None
        xid = next(self._xids)
        shadow, baseline = routes.shadow, routes.baseline
        start = Start(xid, routes.version, routes.primary.url,
                      shadow.url if shadow is not None else None,
                      baseline.url if baseline is not None else None,
                      path, list(headers.items()), body, endpoint, time.time(), perf_counter())
        held = [u.acquire() for u in (routes.primary, shadow, baseline) if u is not None]
        exchange = self.exchanges[xid] = RemoteExchange(link, xid, routes, held, start)
        self.inflight += 1
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
        self.inflight -= 1
        self.metrics.shadow_inflight.dec()

    def _lost(self) -> None:
        """The worker went away: what it had will never be recorded."""
        lost = list(self.exchanges.values())
        for exchange in lost:
            self._done(exchange.xid)
            if not self.closing:
                self.shed(exchange.routes, "worker_lost")

    def flush_admission(self) -> None:
        rows = self.tally.take()
        if rows and not self.link.send(AdmissionCounts(time.time(), rows)):
            self.tally.give_back(rows)  # the worker is down: with the next flush

    async def close(self, drain_timeout_s: float) -> int:
        self.closing = True
        self.flush_admission()
        return await self.link.stop(drain_timeout_s)
