"""The lean mirror client: de-chunking across any split, body framings, keep-alive, errors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest
from multidict import CIMultiDict

from proxy.mirror.mirror_client import Feed, MirrorConnection, MirrorError, MirrorPool

EVENTS = b"data: {\"a\": 1}\n\ndata: [DONE]\n\n"
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"
           b"10\r\n" + EVENTS[:16] + b"\r\n" + f"{len(EVENTS) - 16:x}".encode() + b";ext=1\r\n"
           + EVENTS[16:] + b"\r\n0\r\nX-Trailer: y\r\n\r\n")


def _feed_all(answer: bytes, cut: int | list[int],
              lose: bool = False) -> tuple[int, bytes, list[str]]:
    """Drive a connection with `answer` split at `cut`(s); return status, payload, content type."""
    cuts = sorted(cut) if isinstance(cut, list) else [cut]
    loop = asyncio.new_event_loop()
    try:
        conn = MirrorConnection()

        class Transport:
            def write(self, data: bytes) -> None: ...
            def close(self) -> None: ...
            def abort(self) -> None: ...

        conn.transport = Transport()  # type: ignore[assignment]
        got: list[bytes] = []
        types: list[str] = []

        def on_head(status: int, content_type: str) -> Callable[[bytes, float], None]:
            types.append(content_type)
            return lambda data, t: got.append(data)

        async def run() -> int:
            done = conn.start(b"req", on_head, lambda: None, 1 << 20)
            for start, stop in zip([0, *cuts], [*cuts, len(answer)]):
                conn.data_received(answer[start:stop])
            if lose:  # the server closes in the same loop pass as its last bytes
                conn.connection_lost(None)
            return await asyncio.wait_for(done, 1)

        status = loop.run_until_complete(run())
        return status, b"".join(got), types
    finally:
        loop.close()


@pytest.mark.parametrize("cut", range(0, len(CHUNKED) + 1, 3))
def test_chunked_any_split(cut):
    status, payload, types = _feed_all(CHUNKED, cut)
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
        status, payload, _ = _feed_all(answer, cuts)
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
    pool = MirrorPool(url)
    headers = CIMultiDict({"Authorization": "Bearer k", "Accept-Encoding": "gzip"})
    for _ in range(2):
        got: list[bytes] = []

        def on_head(status: int, content_type: str, sink: list[bytes] = got) -> Feed:
            return lambda data, t: sink.append(data)

        status = await pool.post("/v1/completions", headers, b"{}", on_head, lambda: None,
                                 1 << 20)
        assert status == 200 and b"".join(got) == EVENTS
    assert connections == 1  # the second request reused the connection
    assert seen[0].startswith(b"POST /base/v1/completions HTTP/1.1\r\n")
    assert b"Authorization: Bearer k" in seen[0] and b"gzip" not in seen[0]
    await pool.close()
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize(("answer", "kind"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "bad_response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad_response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "reset"),
])
async def test_errors_have_kinds(answer, kind):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    pool = MirrorPool(url)
    with pytest.raises(MirrorError) as err:
        await pool.post("/", CIMultiDict(), b"", lambda s, c: lambda d, t: None,
                        lambda: None, 1 << 20)
    assert err.value.kind == kind
    server.close()
    await server.wait_closed()


async def test_probe_stops_reading():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED)
        await writer.drain()
        await asyncio.sleep(5)

    server, url = await _serve(handler)
    with pytest.raises(MirrorError) as err:
        await MirrorPool(url).post("/", CIMultiDict(), b"", lambda s, c: lambda d, t: None,
                                   lambda: "invalid_sse", 1 << 20)
    assert err.value.kind == "invalid_sse"
    server.close()
    await server.wait_closed()


async def test_close_delimited_body_ends_with_the_connection():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + EVENTS)
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    got: list[bytes] = []
    status = await MirrorPool(url).post("/", CIMultiDict(), b"",
                                        lambda s, c: lambda d, t: got.append(d),
                                        lambda: None, 1 << 20)
    assert status == 200 and b"".join(got) == EVENTS
    server.close()
    await server.wait_closed()


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
        status = await MirrorPool(url).post("/", CIMultiDict(), b"",
                                            lambda s, c: lambda d, t: got.append(d),
                                            lambda: None, 1 << 20)
        server.close()
        return status, b"".join(got)

    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == (200, EVENTS)
    finally:
        loop.close()


async def test_dead_backend_fails_fast_then_retries(monkeypatch):
    import socket

    from proxy.mirror import mirror_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = MirrorPool(f"http://127.0.0.1:{port}")
    attempts = 0
    real = asyncio.get_running_loop().create_connection

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal attempts
        attempts += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", counting)
    for _ in range(5):
        with pytest.raises(MirrorError, match="connect"):
            await pool.post("/", CIMultiDict(), b"", lambda s, c: lambda d, t: None,
                            lambda: None, 1 << 20)
    assert attempts == 1  # the other four failed without touching the network
    monkeypatch.setattr(mirror_client, "DOWN_S", 0.0)
    pool._down_until = 0.0
    with pytest.raises(MirrorError, match="connect"):
        await pool.post("/", CIMultiDict(), b"", lambda s, c: lambda d, t: None,
                        lambda: None, 1 << 20)
    assert attempts == 2


async def test_refusals_in_a_row_back_off_exponentially_until_a_connect_works(monkeypatch):
    from proxy.mirror import mirror_client

    pool = MirrorPool("http://127.0.0.1:9")
    clock = [100.0]
    monkeypatch.setattr(mirror_client.time, "monotonic", lambda: clock[0])

    async def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", refuse)
    windows = []
    for _ in range(7):
        with pytest.raises(MirrorError, match="connect"):
            await pool._connection()
        assert pool.down
        windows.append(pool._down_until - clock[0])
        clock[0] = pool._down_until
    assert windows == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert not pool.down

    async def accept(*args, **kwargs):  # type: ignore[no-untyped-def]
        return None, MirrorConnection()

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", accept)
    await pool._connection()
    assert pool._refusals == 0
