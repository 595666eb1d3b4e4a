"""The framing cases a review found wrong in the upstream client, each against a real socket.

Every test here failed on the client before `proxy.mirror.upstream.framing` (commit e66da52).
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from proxy.mirror.config import RouteConfig
from proxy.mirror.relay import RelayResult, relay, request_headers
from proxy.mirror.upstream.http1 import Http1Connection, Http1Pool, UpstreamError
from proxy.mirror.upstream.routing import Router, make_pool_factory

ServeFn = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Backend:
    """A raw HTTP/1.1 server that answers each request with the next of `answers`."""

    def __init__(self, answers: list[bytes], close_after: bool = False) -> None:
        self.answers = answers
        self.close_after = close_after
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.release = asyncio.Event()
        self.release.set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while self.answers:
                try:
                    self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                answer = self.answers.pop(0)
                await self.release.wait()
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
            await reader.read()
        finally:
            self.open_now -= 1
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Backend], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(backend: Backend) -> str:
        server = await asyncio.start_server(backend.handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


def _collect(sink: list[bytes]) -> Callable[[Http1Connection], Callable[[bytes, float], None]]:
    return lambda conn: lambda data, t: sink.append(data)


@pytest.mark.parametrize(("method", "answer"), [
    ("POST", b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
    ("GET", b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"),
    ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"),
])
async def test_answers_without_a_body_keep_their_connection(serve, method, answer):
    backend = Backend([answer] * 5)
    pool = Http1Pool(await serve(backend))
    for _ in range(5):
        got: list[bytes] = []
        head = await pool.fetch(method, "/", CIMultiDict(), b"", _collect(got))
        assert got == [] and head.status == int(answer[9:12])
    assert backend.connections == 1  # five answers, one connection
    await pool.close()


@pytest.mark.parametrize("size", [b"0x2", b"+0_2", b"0_2", b" 2", b"2 2", b""])
async def test_chunk_sizes_follow_the_grammar(serve, size):
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size
              + b"\r\nab\r\n0\r\n\r\n")
    pool = Http1Pool(await serve(Backend([answer])))
    with pytest.raises(UpstreamError, match="bad_response"):
        await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))


async def test_a_chunk_extension_and_upper_case_hex_are_fine(serve):
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"0A;name=\"v\"\r\n0123456789\r\n0\r\n\r\n")
    got: list[bytes] = []
    await Http1Pool(await serve(Backend([answer]))).fetch("GET", "/", CIMultiDict(), b"",
                                                          _collect(got))
    assert b"".join(got) == b"0123456789"


@pytest.mark.parametrize("coding", [b"gzip", b"chunked, gzip"])
async def test_a_transfer_coding_that_is_not_chunked_last_is_read_to_the_close(serve, coding):
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding
              + b"\r\nContent-Length: 3\r\n\r\nabcdef")
    backend = Backend([answer], close_after=True)
    got: list[bytes] = []
    pool = Http1Pool(await serve(backend))
    await pool.fetch("GET", "/", CIMultiDict(), b"", _collect(got))
    assert b"".join(got) == b"abcdef"  # not the 3 bytes Content-Length says
    assert not pool._idle  # never reused


@pytest.mark.parametrize("line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 20 OK", b"HTTP/1.1 200OK",
                                  b"HTTP/1.1 099 Low", b"HTTP/1.x 200 OK"])
async def test_a_malformed_status_line_is_refused(serve, line):
    pool = Http1Pool(await serve(Backend([line + b"\r\nContent-Length: 0\r\n\r\n"])))
    with pytest.raises(UpstreamError, match="bad_response"):
        await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))


async def test_connection_close_is_a_token_not_a_substring(serve):
    """`Connection: closed-x` is some other token; the connection stays."""
    answer = b"HTTP/1.1 200 OK\r\nConnection: closed-x\r\nContent-Length: 2\r\n\r\nok"
    backend = Backend([answer, answer])
    pool = Http1Pool(await serve(backend))
    for _ in range(2):
        await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))
    assert backend.connections == 1
    await pool.close()


async def test_a_pool_holds_at_most_its_cap_and_the_rest_wait(serve):
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    backend = Backend([answer] * 6)
    backend.release.clear()
    pool = Http1Pool(await serve(backend), max_connections=2)
    fetches = [asyncio.ensure_future(pool.fetch("GET", "/", CIMultiDict(), b"", _collect([])))
               for _ in range(6)]
    while len(backend.requests) < 2:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert (backend.connections, len(backend.requests)) == (2, 2)  # four requests wait
    backend.release.set()
    heads = await asyncio.wait_for(asyncio.gather(*fetches), 5)
    assert [h.status for h in heads] == [200] * 6
    assert backend.most_open == 2 and pool.connections == 2
    await pool.close()


async def test_a_request_that_finds_no_free_connection_in_time_fails_as_pool_full(serve):
    backend = Backend([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] * 2)
    backend.release.clear()
    pool = Http1Pool(await serve(backend), connect_timeout_s=0.2, max_connections=1)
    first = asyncio.ensure_future(pool.fetch("GET", "/", CIMultiDict(), b"", _collect([])))
    while not backend.requests:
        await asyncio.sleep(0.01)
    with pytest.raises(UpstreamError, match="pool_full"):
        await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))
    backend.release.set()
    assert (await first).status == 200
    assert backend.connections == 1 and pool.connections == 1
    await pool.close()


async def test_closing_a_pool_fails_its_waiting_requests_without_cancelling_them(serve):
    backend = Backend([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] * 2)
    backend.release.clear()
    pool = Http1Pool(await serve(backend), max_connections=1)
    first = asyncio.ensure_future(pool.fetch("GET", "/", CIMultiDict(), b"", _collect([])))
    while not backend.requests:
        await asyncio.sleep(0.01)
    second = asyncio.ensure_future(pool.fetch("GET", "/", CIMultiDict(), b"", _collect([])))
    await asyncio.sleep(0.05)
    await pool.close()
    with pytest.raises(UpstreamError, match="connect"):
        await second
    backend.release.set()
    assert (await first).status == 200


async def test_a_capped_pool_frees_the_slot_of_a_failed_connection(serve, dead_url):
    pool = Http1Pool(dead_url(), connect_timeout_s=0.5, max_connections=1)
    for _ in range(3):
        with pytest.raises(UpstreamError, match="connect"):
            await pool.fetch("GET", "/", CIMultiDict(), b"", _collect([]))
    assert pool.connections == 0


# -- through the relay: Content-Encoding on the capture, trailers to the client ------------

async def _relay_server(primary_url: str, taps: list[tuple[str, list[bytes]]],
                        results: list[RelayResult]) -> TestServer:
    """An aiohttp server whose only handler relays to `primary_url`, tapping the answer."""
    router = Router(RouteConfig(primary_url), make_pool_factory(5.0))

    def tap_for(content_type: str) -> Callable[[bytes, float], None]:
        sink: list[bytes] = []
        taps.append((content_type, sink))
        return lambda chunk, t: sink.append(chunk)

    async def handler(request: web.Request) -> web.StreamResponse:
        result = RelayResult()
        results.append(result)
        return await relay(request, router.routes.primary, await request.read(),
                           request_headers(request.headers), result, tap_for)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    app.on_cleanup.append(lambda _: router.close())
    server = TestServer(app)
    await server.start_server()
    return server


async def _through_relay(primary_url: str, request: bytes,
                         taps: list[tuple[str, list[bytes]]] | None = None,
                         results: list[RelayResult] | None = None) -> bytes:
    """What a raw client sending `request` gets through the relay: every byte of it."""
    server = await _relay_server(primary_url, [] if taps is None else taps,
                                 [] if results is None else results)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return data
    finally:
        await server.close()


REQUEST_11 = b"GET /v1/x HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_an_encoded_answer_reaches_the_client_as_sent_and_the_capture_decoded(serve,
                                                                                   coding):
    events = b'data: {"a": 1}\n\n' * 20 + b"data: [DONE]\n\n"
    if coding == "gzip":
        body = gzip.compress(events)
    else:
        packer = zlib.compressobj(wbits=-15 if coding == "raw-deflate" else 15)
        body = packer.compress(events) + packer.flush()
    name = "gzip" if coding == "gzip" else "deflate"
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(body[i:i + 50]), body[i:i + 50])
                      for i in range(0, len(body), 50))
    answer = (f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: {name}"
              f"\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"
    taps: list[tuple[str, list[bytes]]] = []
    results: list[RelayResult] = []
    raw = await _through_relay(await serve(Backend([answer])), REQUEST_11, taps, results)
    head, _, chunked_body = raw.partition(b"\r\n\r\n")
    assert f"Content-Encoding: {name}".encode() in head
    assert _dechunk(chunked_body) == body  # byte-exact to the client
    assert taps[0][0] == "text/event-stream" and b"".join(taps[0][1]) == events
    assert not results[0].capture_failed


async def test_a_coding_the_capture_cannot_read_is_relayed_and_not_compared(serve, caplog):
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: br\r\n"
              b"Content-Length: 4\r\n\r\n\x8b\x01\x80{")
    taps: list[tuple[str, list[bytes]]] = []
    results: list[RelayResult] = []
    raw = await _through_relay(await serve(Backend([answer])), REQUEST_11, taps, results)
    assert raw.endswith(b"\r\n\r\n\x8b\x01\x80{") and b"Content-Encoding: br" in raw
    assert taps == [] and results[0].capture_failed
    assert "Content-Encoding 'br'" in caplog.text


async def test_trailers_reach_a_chunked_client(serve):
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Checksum\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n"
              b"Content-Length: 99\r\n\r\n")
    raw = await _through_relay(await serve(Backend([answer])), REQUEST_11)
    body = raw.partition(b"\r\n\r\n")[2]
    assert body == b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"  # framing fields dropped


async def test_trailers_to_an_http10_client_are_logged_by_name(serve, caplog):
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
              b"X-Checksum: abc\r\n\r\n")
    raw = await _through_relay(await serve(Backend([answer])), b"GET / HTTP/1.0\r\nHost: p\r\n\r\n")
    assert raw.endswith(b"\r\n\r\nhello")
    assert "trailers ['x-checksum']" in caplog.text and "abc" not in caplog.text


async def test_a_body_read_to_the_close_reaches_the_client_whole_without_a_stale_length(serve):
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\n"
              b"abcdef")
    raw = await _through_relay(await serve(Backend([answer], close_after=True)), REQUEST_11)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Content-Length: 3" not in head
    assert _dechunk(body) == b"abcdef"


def _dechunk(body: bytes) -> bytes:
    """A plain reference de-chunker for what the proxy sent its client."""
    out = b""
    while True:
        line, _, body = body.partition(b"\r\n")
        size = int(line, 16)
        if size == 0:
            return out
        out, body = out + body[:size], body[size + 2:]
