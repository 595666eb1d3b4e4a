"""The lean upstream client: de-chunking across any split, body framings, keep-alive, errors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest
from multidict import CIMultiDict

from proxy.mirror.upstream.http1 import Feed, Http1Connection, Http1Pool, UpstreamError

EVENTS = b"data: {\"a\": 1}\n\ndata: [DONE]\n\n"
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"
           b"10\r\n" + EVENTS[:16] + b"\r\n" + f"{len(EVENTS) - 16:x}".encode() + b";ext=1\r\n"
           + EVENTS[16:] + b"\r\n0\r\nX-Trailer: y\r\n\r\n")


class _Transport:
    def __init__(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _feed_all(answer: bytes, cut: int | list[int], lose: bool = False,
              late: bool = False) -> tuple[int, bytes, list[str]]:
    """Drive a connection with `answer` split at `cut`(s); return status, payload, content type.

    The feed is attached as soon as the head is in, or (`late`) after all bytes arrived,
    so both the direct and the held delivery are exercised.
    """
    cuts = sorted(cut) if isinstance(cut, list) else [cut]
    loop = asyncio.new_event_loop()
    try:
        conn = Http1Connection()
        conn.transport = _Transport()  # type: ignore[assignment]
        got: list[bytes] = []

        async def run() -> int:
            head = conn.send(b"req")
            done = None
            for start, stop in zip([0, *cuts], [*cuts, len(answer)]):
                conn.data_received(answer[start:stop])
                if head.done() and done is None and not late:
                    done = conn.attach(lambda data, t: got.append(data))
            if lose:  # the server closes in the same loop pass as its last bytes
                conn.connection_lost(None)
            if done is None:
                done = conn.attach(lambda data, t: got.append(data))
            await asyncio.wait_for(done, 1)
            assert not conn.transport.paused  # type: ignore[union-attr]
            return (await head).status

        status = loop.run_until_complete(run())
        assert conn.head is not None
        return status, b"".join(got), [conn.head.content_type]
    finally:
        loop.close()


@pytest.mark.parametrize("cut", range(0, len(CHUNKED) + 1, 3))
def test_chunked_any_split(cut):
    for late in (False, True):
        status, payload, types = _feed_all(CHUNKED, cut, late=late)
        assert (status, payload, types) == (200, EVENTS, ["text/event-stream"])


def test_many_chunks_read_whole_or_split_anywhere():
    rng = random.Random(7)
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    events = [b'data: {"i": %d, "t": "%s"}\n\n' % (i, b"x" * rng.randint(0, 300))
              for i in range(40)]
    body = b"".join((b"%x" if i % 3 else b"%X") % len(e) + (b";e=1" if i == 5 else b"")
                    + b"\r\n" + e + b"\r\n" for i, e in enumerate(events))
    answer = head + body + b"0\r\n\r\n"
    bounds = [len(head)]
    for e in events:
        bounds.append(bounds[-1] + len(b"%x" % len(e)) + (4 if len(bounds) == 6 else 0)
                      + 4 + len(e))
    for trial in range(60):
        cuts = rng.sample(bounds, 10) if trial % 2 else rng.sample(range(1, len(answer)), 12)
        status, payload, _ = _feed_all(answer, cuts, late=trial % 4 == 1)
        assert (status, payload) == (200, b"".join(events)), cuts


def test_close_delimited_same_pass_keeps_all_payload():
    answer = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + EVENTS
    assert _feed_all(answer, 40, lose=True)[:2] == (200, EVENTS)


def test_content_length():
    body = b'{"x": 1}'
    answer = b"HTTP/1.1 400 Bad\r\nContent-Length: 8\r\nContent-Type: application/json\r\n\r\n"
    assert _feed_all(answer + body, 30)[:2] == (400, body)


ServeFn = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: ServeFn) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/base"


def _collect(sink: list[bytes]) -> Callable[[Http1Connection], Feed]:
    return lambda conn: lambda data, t: sink.append(data)


async def _stop(server: asyncio.Server) -> None:
    server.close()
    await server.wait_closed()


async def test_keep_alive_reuse_and_request_shape():
    seen: list[bytes] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            writer.write(CHUNKED)
            await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    pool = Http1Pool(url)
    headers = CIMultiDict({"Authorization": "Bearer k"})
    for _ in range(2):
        got: list[bytes] = []
        head = await pool.fetch("POST", "/v1/completions", headers, b"{}", _collect(got))
        assert head.status == 200 and b"".join(got) == EVENTS
    assert connections == 1  # the second request reused the connection
    assert seen[0].startswith(b"POST /base/v1/completions HTTP/1.1\r\n")
    assert b"Authorization: Bearer k" in seen[0] and b"Content-Length: 2\r\n" in seen[0]
    await pool.close()
    await _stop(server)


@pytest.mark.parametrize(("answer", "kind"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "bad_response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad_response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "reset"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "bad_response"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", "bad_response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n", "bad_response"),
    # A trailer that never ends is refused once it is longer than a head may be.
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + b"a" * 70_000,
     "bad_response"),
    (b"", "reset"),
])
async def test_errors_have_kinds(answer, kind):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    with pytest.raises(UpstreamError) as err:
        await Http1Pool(url).fetch("POST", "/", CIMultiDict(), b"", _collect([]))
    assert err.value.kind == kind
    await _stop(server)


async def test_a_feed_can_stop_reading():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED[:-5])  # the answer never ends
        await writer.drain()
        await asyncio.sleep(5)

    def feed_for(conn: Http1Connection) -> Feed:
        return lambda data, t: conn.fail("invalid_sse")

    server, url = await _serve(handler)
    with pytest.raises(UpstreamError) as err:
        await asyncio.wait_for(Http1Pool(url).fetch("POST", "/", CIMultiDict(), b"", feed_for), 2)
    assert err.value.kind == "invalid_sse"
    await _stop(server)


async def test_close_delimited_body_ends_with_the_connection():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + EVENTS)
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    got: list[bytes] = []
    head = await Http1Pool(url).fetch("POST", "/", CIMultiDict(), b"", _collect(got))
    assert head.status == 200 and b"".join(got) == EVENTS
    await _stop(server)


async def test_head_request_and_interim_answers_have_no_body():
    """HEAD's answer has a Content-Length but no body; 1xx heads before the real one are skipped."""
    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n",
               (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
        await reader.read()

    server, url = await _serve(handler)
    pool = Http1Pool(url)
    got: list[bytes] = []
    head = await pool.fetch("HEAD", "/", CIMultiDict(), b"", _collect(got))
    assert (head.status, got) == (200, [])
    head = await pool.fetch("GET", "/", CIMultiDict(), b"", _collect(got))
    assert (head.status, got, head.headers) == (200, [b"ok"], (("Content-Length", "2"),))
    await pool.close()
    await _stop(server)


async def test_a_stale_keep_alive_connection_is_retried_once():
    """The backend closed an idle connection just as it was reused: resend on a new one."""
    requests = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            requests += 1
            if requests == 2:
                writer.close()  # closes without answering: what a keep-alive timeout looks like
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    server, url = await _serve(handler)
    pool = Http1Pool(url)
    for _ in range(2):
        got: list[bytes] = []
        head = await pool.fetch("GET", "/", CIMultiDict(), b"", _collect(got))
        assert (head.status, got) == (200, [b"ok"])
    assert requests == 3
    await pool.close()
    await _stop(server)


def test_works_on_uvloop():
    """The CLI runs on uvloop, whose transports are not asyncio.Transport subclasses."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> tuple[int, bytes]:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(CHUNKED)
            await writer.drain()

        server, url = await _serve(handler)
        got: list[bytes] = []
        head = await Http1Pool(url).fetch("POST", "/", CIMultiDict(), b"", _collect(got))
        server.close()
        return head.status, b"".join(got)

    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == (200, EVENTS)
    finally:
        loop.close()


async def test_dead_backend_fails_fast_then_retries(monkeypatch):
    import socket

    from proxy.mirror.upstream import http1

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = Http1Pool(f"http://127.0.0.1:{port}", fail_fast=True)
    attempts = 0
    real = asyncio.get_running_loop().create_connection

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal attempts
        attempts += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", counting)
    for _ in range(5):
        with pytest.raises(UpstreamError, match="connect"):
            await pool.fetch("POST", "/", CIMultiDict(), b"", _collect([]))
    assert attempts == 1  # the other four failed without touching the network
    monkeypatch.setattr(http1, "DOWN_S", 0.0)
    pool._down_until = 0.0
    with pytest.raises(UpstreamError, match="connect"):
        await pool.fetch("POST", "/", CIMultiDict(), b"", _collect([]))
    assert attempts == 2


async def test_the_primary_lane_never_fails_fast(dead_url):
    pool = Http1Pool(dead_url())
    for _ in range(2):
        with pytest.raises(UpstreamError, match="connect"):
            await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))
        assert not pool.down


async def test_refusals_in_a_row_back_off_exponentially_until_a_connect_works(monkeypatch):
    from proxy.mirror.upstream import http1

    pool = Http1Pool("http://127.0.0.1:9", fail_fast=True)
    clock = [100.0]
    monkeypatch.setattr(http1.time, "monotonic", lambda: clock[0])

    async def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", refuse)
    windows = []
    for _ in range(7):
        with pytest.raises(UpstreamError, match="connect"):
            await pool._new_connection()
        assert pool.down
        windows.append(pool._down_until - clock[0])
        clock[0] = pool._down_until
    assert windows == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert not pool.down

    async def accept(*args, **kwargs):  # type: ignore[no-untyped-def]
        return None, Http1Connection()

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", accept)
    await pool._new_connection()
    assert pool._refusals == 0


async def test_within_times_out_without_a_task_and_passes_cancellation_through():
    from proxy.mirror.upstream.http1 import within

    async def slow(caller: asyncio.Task[object] | None) -> int:
        assert asyncio.current_task() is caller  # no task of its own
        await asyncio.sleep(5)
        return 1

    with pytest.raises(asyncio.TimeoutError):
        await within(slow(asyncio.current_task()), 0.05)
    me = asyncio.current_task()
    if me is not None and hasattr(me, "cancelling"):  # 3.11+: our cancel was taken back
        assert me.cancelling() == 0
    assert await within(asyncio.sleep(0, result=7), 1) == 7

    async def outer() -> int:
        return await within(slow(asyncio.current_task()), 5)

    task = asyncio.get_running_loop().create_task(outer())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_new_connection_is_confirmed_once_before_its_first_byte():
    """`confirm` is asked after the connect and before anything is sent; a refused
    connection is closed unused, and the pool fails fast (no connect, no question)."""
    received: list[bytes] = []
    accepted = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            received.append(head + await reader.readexactly(length))
            writer.write(CHUNKED)
            await writer.drain()

    server, url = await _serve(handler)
    asked: list[tuple[int, int]] = []  # (connections accepted, requests received) when asked
    answer: list[str | None] = [None]

    async def confirm() -> str | None:
        await asyncio.sleep(0.01)  # the server has accepted by now
        asked.append((accepted, len(received)))
        return answer[0]

    pool = Http1Pool(url, fail_fast=True, confirm=confirm)
    for _ in range(2):
        await pool.fetch("POST", "/v1/completions", CIMultiDict(), b"{}", _collect([]))
    assert asked == [(1, 0)] and len(received) == 2  # asked once, before the first request
    pool._idle.clear()  # the next request needs a new connection
    answer[0] = "the old container old is exited"
    with pytest.raises(UpstreamError, match="unconfirmed"):
        await pool.fetch("POST", "/v1/completions", CIMultiDict(), b"{}", _collect([]))
    assert asked[1:] == [(2, 2)] and len(received) == 2  # accepted, nothing sent on it
    assert pool.down
    with pytest.raises(UpstreamError, match="unconfirmed"):
        await pool.fetch("POST", "/v1/completions", CIMultiDict(), b"{}", _collect([]))
    assert len(asked) == 2 and accepted == 2
    await pool.close()
    await _stop(server)


async def test_a_confirmation_that_does_not_come_is_a_refusal():
    server, url = await _serve(lambda reader, writer: asyncio.sleep(5))
    never = asyncio.Event()

    async def confirm() -> str | None:
        await never.wait()
        return None

    pool = Http1Pool(url, connect_timeout_s=0.2, fail_fast=True, confirm=confirm)
    with pytest.raises(UpstreamError, match="unconfirmed"):
        await pool.fetch("POST", "/", CIMultiDict(), b"{}", _collect([]))
    assert pool.connections == 0  # the connection was closed, its slot freed
    assert pool.down and pool.down_kind == "unconfirmed"
    await pool.close()
    await _stop(server)
