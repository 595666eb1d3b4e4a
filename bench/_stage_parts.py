"""The stages of `capture_stages.py` that need sockets: the hand-over to the worker, the
worker's reads of the mirrors' answers, and the whole worker against real backends.

Each returns CPU seconds (user + system of this process, all threads) per mirrored
request, best of `runs`, and the system part of that run; the backends are the
bench's inline ones, in other processes on the other CPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _paths import Layout, backend
from _procs import free_port
from multidict import CIMultiDict

from proxy.capture.request import PreparedRequest
from proxy.mirror.config import ProxyConfig, RouteConfig, StoreConfig
from proxy.mirror.exchange import unstreamed
from proxy.mirror.shadow import mirror_headers
from proxy.mirror.upstream.http1 import Feed, Http1Connection, Http1Pool
from proxy.mirror.worker.ipc import Channel
from proxy.mirror.worker.messages import Done, End, Start

CONCURRENCY = 32
CLIENT_HEADERS = (("Content-Type", "application/json"), ("Accept", "text/event-stream"))
PATH = "/v1/completions"


@dataclass(frozen=True)
class Stream:
    """One streamed answer as the relay sees it: payloads and their arrival times."""

    payloads: list[bytes]
    times: list[float]


@contextlib.contextmanager
def with_backends(tmp: Path, itl_s: float) -> Iterator[dict[str, str]]:
    """Inline backends for the shadow and the baseline, off this process's CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    layout = Layout(relay_cpus=tuple(cpus[:1]), load_cpus=tuple(cpus[1:] or cpus), log_dir=tmp)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[0]})
    with backend(layout, "inline", "shadow", free_port(), 0.0, itl_s * 1000) as shadow, \
            backend(layout, "inline", "baseline", free_port(), 0.0, itl_s * 1000) as baseline:
        yield {"shadow": shadow.url, "baseline": baseline.url}


Cpu = tuple[float, float]  # CPU seconds per request: (user + system, system)


def cpu_now() -> Cpu:
    """CPU seconds of this process so far: all (nanoseconds), system (tick-sampled split)."""
    return time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime


async def _best(runs: int, requests: int, one: Callable[[int], Awaitable[None]],
                after: Callable[[], Awaitable[None]] | None = None) -> Cpu:
    """CPU seconds per request of `requests` calls of `one`, CONCURRENCY at a time."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def limited(i: int) -> None:
        async with slots:
            await one(i)

    await asyncio.gather(*(limited(i) for i in range(CONCURRENCY)))  # warm: connections
    best = (float("inf"), 0.0)
    for _ in range(runs):
        start = cpu_now()
        await asyncio.gather(*(limited(i) for i in range(requests)))
        if after is not None:
            await after()
        end = cpu_now()
        best = min(best, ((end[0] - start[0]) / requests, (end[1] - start[1]) / requests))
    return best


async def handover(primary: Stream, requests: int, runs: int) -> Cpu:
    """The relay holding the primary's payloads and sending its messages to the worker as
    `RemoteExchange` does (start, then end with every payload: 64 events stay below its
    flush size); the worker's end reading and unpickling them."""
    loop = asyncio.get_running_loop()
    relay_sock, worker_sock = socket.socketpair()
    waiting: dict[int, asyncio.Future[None]] = {}

    def on_message(message: object) -> None:
        if isinstance(message, End):
            waiting.pop(message.xid).set_result(None)

    worker_end = Channel(on_message, lambda exc: None)
    relay_end = Channel(lambda message: None, lambda exc: None)
    await loop.create_unix_connection(lambda: worker_end, sock=worker_sock)
    await loop.create_unix_connection(lambda: relay_end, sock=relay_sock)

    async def one(xid: int) -> None:
        waiting[xid] = loop.create_future()
        relay_end.send(Start(xid, 1, "http://p", "http://s", "http://b", PATH,
                             list(CLIENT_HEADERS), {}, "completions", time.time(),
                             time.perf_counter()))
        payloads: list[bytes] = []
        times: list[float] = []
        for payload, t in zip(primary.payloads, primary.times):
            payloads.append(payload)
            times.append(t)
        relay_end.send(End(xid, "text/event-stream", payloads, times, 200, None, False,
                           times[-1]))
        await waiting[xid]

    try:
        return await _best(runs, requests, one)
    finally:
        relay_end.close()
        worker_end.close()


async def reads(urls: dict[str, str], prepared: PreparedRequest, requests: int,
                runs: int) -> Cpu:
    """The worker's client reading the shadow's stream and the baseline's body, no parsing."""
    pools = {role: Http1Pool(urls[role], fail_fast=True) for role in ("shadow", "baseline")}
    headers = mirror_headers(CIMultiDict(CLIENT_HEADERS))
    bodies = {"shadow": prepared.shadow_body, "baseline": unstreamed(prepared)}

    def feed_for(conn: Http1Connection) -> Feed:
        return lambda payload, t: None

    async def one(i: int) -> None:
        await asyncio.gather(*(pool.fetch("POST", PATH, headers, bodies[role], feed_for)
                               for role, pool in pools.items()))

    try:
        return await _best(runs, requests, one)
    finally:
        for pool in pools.values():
            await pool.close()


async def whole_worker(urls: dict[str, str], client_body: dict[str, Any], primary: Stream,
                       requests: int, runs: int, tmp: Path) -> Cpu:
    """CaptureWorker.handle with the relay's start and end messages, as over the channel."""
    from proxy.mirror.worker.process import CaptureWorker  # loads scipy: only here

    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[None]] = {}

    class Sink:
        """The worker's channel to the relay: only "done" matters here."""

        handled_bytes = 0

        def send(self, message: object) -> int:
            if isinstance(message, Done):
                waiting.pop(message.xid).set_result(None)
            return 1

        def close(self) -> None:
            pass

    # The baseline's backend stands in for the primary: the worker never asks it anything
    # here (equal texts need no /tokenize).
    routes = RouteConfig(urls["baseline"], urls["shadow"], urls["baseline"])
    config = ProxyConfig(routes=routes, store=StoreConfig(db_path=str(tmp / "worker.sqlite")))
    worker = CaptureWorker(config, Sink(), "normal")  # type: ignore[arg-type]
    await worker.open()
    itl_s = primary.times[1] - primary.times[0]
    count = len(primary.payloads)

    async def one(xid: int) -> None:
        waiting[xid] = done = loop.create_future()
        worker.handle(Start(xid, 1, routes.primary, routes.shadow, routes.baseline, PATH,
                            list(CLIENT_HEADERS), client_body, "completions", time.time(),
                            time.perf_counter()))
        await asyncio.sleep(count * itl_s)  # the primary streams to its client meanwhile
        t_end = time.perf_counter()
        times = [t_end - (count - 1 - i) * itl_s for i in range(count)]
        worker.handle(End(xid, "text/event-stream", primary.payloads, times, 200, None,
                          False, t_end))
        await done

    try:
        return await _best(runs, requests, one, after=worker.store.flush)
    finally:
        worker.stop(5.0)
        await worker.stopped
