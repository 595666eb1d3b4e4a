"""The kernel-stamped transport: reads are timed when the data arrived, not when a busy
event loop got to them; and it carries whole HTTP exchanges like asyncio's own."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from time import perf_counter
from typing import Any

import pytest
from multidict import CIMultiDict

from proxy.mirror.upstream.http1 import Http1Pool
from proxy.mirror.upstream.stamped import keep_stamping_on, open_stamped, stamping_works


class Recorder:
    def __init__(self) -> None:
        self.reads: list[tuple[bytes, float, float]] = []  # data, stamp, read time
        self.lost: asyncio.Future[Exception | None] = \
            asyncio.get_running_loop().create_future()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received_at(self, data: bytes, t: float) -> None:
        self.reads.append((data, t, perf_counter()))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def _server(script: Any) -> tuple[int, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            script(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return int(listener.getsockname()[1]), thread


def _busy_until_sent(sent_at: list[float], then_s: float) -> None:
    """The loop is busy elsewhere (never yields) while the data waits in the socket."""
    while not sent_at:
        time.sleep(0.001)
    time.sleep(then_s)


def _stamping_switched_on(within_s: float = 5.0) -> None:
    """The kernel switches stamping on in deferred work: on a loaded host that can lag."""
    deadline = perf_counter() + within_s
    while not stamping_works():
        assert perf_counter() < deadline, "the kernel never stamped a read"


def test_the_keeper_keeps_stamping_on_and_is_one_socket() -> None:
    assert keep_stamping_on() is keep_stamping_on()
    _stamping_switched_on()
    assert stamping_works(0.05)


async def test_a_read_is_timed_at_arrival_even_when_the_loop_was_busy() -> None:
    _stamping_switched_on()
    sent_at: list[float] = []

    def script(conn: socket.socket) -> None:
        conn.recv(100)
        sent_at.append(perf_counter())
        conn.sendall(b"event one")
        time.sleep(0.5)

    port, thread = _server(script)
    transport, recorder = await open_stamped(Recorder, "127.0.0.1", port)
    transport.write(b"go")
    _busy_until_sent(sent_at, 0.3)
    while not recorder.reads:
        await asyncio.sleep(0.001)
    data, stamp, read = recorder.reads[0]
    assert data == b"event one"
    assert read - sent_at[0] >= 0.29  # read late...
    assert stamp - sent_at[0] < 0.05  # ...timed on arrival
    transport.close()
    assert await recorder.lost is None
    thread.join(2)


async def test_a_large_write_is_buffered_and_the_peer_closing_ends_the_connection() -> None:
    got = bytearray()
    payload = b"x" * (8 * 1024 * 1024)

    def script(conn: socket.socket) -> None:
        time.sleep(0.2)  # let the client's socket buffer fill first
        while len(got) < len(payload):
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            got.extend(chunk)
        conn.sendall(b"done")

    port, thread = _server(script)
    transport, recorder = await open_stamped(Recorder, "127.0.0.1", port)
    transport.write(payload)
    assert await asyncio.wait_for(recorder.lost, 10) is None
    thread.join(2)
    assert bytes(got) == payload
    assert b"".join(r[0] for r in recorder.reads) == b"done"


async def test_a_refused_connect_raises() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, not listening: refused
    port = holder.getsockname()[1]
    try:
        await open_stamped(Recorder, "127.0.0.1", port)
    except OSError:
        pass
    else:
        raise AssertionError("connect to a closed port succeeded")
    finally:
        holder.close()


def _append_to(pieces: list[tuple[bytes, float]]) -> Any:
    return lambda payload, t: pieces.append((payload, t))


async def test_a_stamped_pool_reads_a_chunked_stream_whole(aiohttp_server: Any) -> None:
    from aiohttp import web

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(20):
            await response.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(0.002)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    server = await aiohttp_server(app)
    pool = Http1Pool(str(server.make_url("")).rstrip("/"), stamped=True)
    assert pool.stamped
    pieces: list[tuple[bytes, float]] = []
    for _ in range(2):  # the second request reuses the kept-alive stamped connection
        pieces.clear()
        head = await pool.fetch("POST", "/v1/completions", CIMultiDict(), b"{}",
                                lambda conn: _append_to(pieces))
        assert head.status == 200
        assert b"".join(p for p, _ in pieces) == b"".join(
            f"data: {i}\n\n".encode() for i in range(20))
        times = [t for _, t in pieces]
        assert times == sorted(times)
    await pool.close()


async def test_a_shadow_is_timed_from_its_send_to_its_arrival(aiohttp_server: Any) -> None:
    """A worker that waits for the CPU before sending, and again before reading, still
    measures the backend's own time to first token (20 ms here), not its own waits."""
    from proxy.mirror.config import RouteConfig
    from proxy.mirror.shadow import fetch_capture
    from proxy.mirror.upstream.routing import Router, make_pool_factory
    from proxy.sim.app import make_sim_app
    from proxy.sim.config import SimConfig

    _stamping_switched_on()
    server = await aiohttp_server(make_sim_app(SimConfig(ttft_ms=20.0, itl_ms=1.0)))
    url = str(server.make_url("")).rstrip("/")
    router = Router(RouteConfig(url, url), make_pool_factory(5.0))
    shadow = router.routes.shadow
    assert shadow is not None
    body = b'{"model": "sim-model", "prompt": "hi", "max_tokens": 4, "stream": true}'
    headers = CIMultiDict({"Content-Type": "application/json"})
    task = asyncio.create_task(fetch_capture(shadow, "shadow", url, "/v1/completions",
                                             headers, body, 10.0))
    loop = asyncio.get_running_loop()
    loop.call_soon(time.sleep, 0.3)  # busy before the request is sent...
    loop.call_later(0.05, time.sleep, 0.3)  # ...and while its answer arrives
    capture = await task
    await router.close()
    assert capture.error is None and capture.ttft_s is not None
    assert 0.015 < capture.ttft_s < 0.2, capture.ttft_s


_READS_SCRIPT = """
import asyncio, resource, socket, sys
from proxy.mirror.upstream.stamped import open_stamped

READS = int(sys.argv[1])

class Count:
    def __init__(self):
        self.reads = 0
        self.done = asyncio.get_running_loop().create_future()
    def connection_made(self, transport):
        pass
    def data_received_at(self, data, t):
        self.reads += 1
        if self.reads == READS and not self.done.done():
            self.done.set_result(None)
    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(None)

async def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    accepted = loop.sock_accept(listener)
    transport, counter = await open_stamped(Count, "127.0.0.1", listener.getsockname()[1])
    peer, _ = await accepted
    event = b"data: " + b"x" * 300 + b"\\n\\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(READS):  # one event at a time, each read on its own, as a paced stream
        peer.send(event)
        seen = counter.reads
        while counter.reads == seen and not counter.done.done():
            await asyncio.sleep(0)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    transport.close()
    # The control: plain reads of 256 KiB in the same process fault each time on this
    # allocator (a mapping per read); where they do not, the count above proves nothing.
    a, b = socket.socketpair()
    control = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(READS):
        a.send(event)
        b.recv(256 * 1024)
    control = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - control
    peer.close()
    print(after - before, control)

asyncio.run(main())
"""


def test_small_reads_do_not_map_a_fresh_buffer_each_time() -> None:
    """Each read's buffer comes from the heap: a read buffer over glibc's mmap threshold was
    mapped, faulted in and unmapped on every read (7 us each, most of a paced event's read
    cost). Counted as page faults in a fresh process: a fresh mapping per read faults at
    least once per read."""
    import subprocess
    import sys
    from pathlib import Path

    reads = 2000
    done = subprocess.run([sys.executable, "-c", _READS_SCRIPT, str(reads)], capture_output=True,
                          text=True, timeout=120, check=False,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    faults, control = (int(word) for word in done.stdout.split()[-2:])
    if control < reads:
        pytest.skip(f"this allocator does not map a large read buffer each time ({control} "
                    f"faults over {reads} plain 256 KiB reads): nothing to tell apart")
    assert faults < reads // 10, f"{faults} minor page faults over {reads} reads"
