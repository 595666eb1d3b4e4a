"""Forwarding to the primary: headers in and out, raw bytes relayed chunk by chunk.

The request goes out on the primary lane's `Http1Pool`. The client gets the primary's
status and headers (minus hop-by-hop) through aiohttp's response, and its body bytes
unchanged, each piece written from the upstream socket's callback as soon as it
arrives (`_ClientSink`), never buffered. Errors the proxy itself
produces are marked (`X-Vllm-Cutover-Error: 1` and a JSON body whose error type
is `vllm_cutover_proxy_error`) so nobody mistakes them for vLLM's answers.

What the client gets stays byte-exact; only the capture sees through a Content-Encoding:
gzip and deflate are decoded for the tap, any other coding (br, zstd) is not compared
(the primary's capture fails as "capture_failed", logged with the coding). Trailers of a
chunked answer go on to a client whose answer is chunked too, else they are logged
(by name) and dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from time import perf_counter
from typing import cast

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import HttpVersion11
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.mirror.upstream.http1 import Http1Connection, UpstreamError
from proxy.mirror.upstream.routing import Upstream
from proxy.tasks import start_task

log = logging.getLogger(__name__)

PROXY_ERROR_HEADER = "X-Vllm-Cutover-Error"
PROXY_ERROR_TYPE = "vllm_cutover_proxy_error"
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
})
# Set by aiohttp from the body (Content-Length) or for the upstream (Host); the body is
# already read, so an Expect: 100-continue would only cost the upstream a round trip.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "expect"}
_CHUNKED_RESPONSE_DROP = HOP_BY_HOP | {"content-length"}
# Fields a trailer must not carry (RFC 9110 section 6.5.1: framing, routing, auth).
_TRAILER_DROP = _CHUNKED_RESPONSE_DROP | {"host", "content-encoding", "content-type",
                                          "authorization", "set-cookie"}
DECODED_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})
ChunkTap = Callable[[bytes, float], None]
TapFactory = Callable[[str], ChunkTap]  # content type -> tap
CLIENT_GONE = "client_gone"
WRITE_HIGH_BYTES = 64 * 1024  # client write buffer above this: pause reading the primary


def _connection_tokens(headers: Collection[tuple[str, str]]) -> frozenset[str]:
    value = next((v for name, v in headers if name.lower() == "connection"), None)
    if not value:
        return frozenset()
    return frozenset(t.strip().lower() for t in value.split(",") if t.strip())


def filter_headers(headers: Collection[tuple[str, str]], drop: frozenset[str]) -> CIMultiDict[str]:
    """Copy `headers` without hop-by-hop ones (including those named by Connection)."""
    extra = _connection_tokens(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers:
        lower = name.lower()
        if lower not in drop and lower not in extra:
            out.add(name, value)
    return out


def request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return filter_headers(headers.items(), _REQUEST_DROP)


def response_headers(headers: tuple[tuple[str, str], ...], chunked: bool) -> CIMultiDict[str]:
    """The primary's answer headers for the client: a body framed by Transfer-Encoding
    (chunked, or read to the close) drops Content-Length (RFC 9112 section 6.3)."""
    coded = chunked or any(name.lower() == "transfer-encoding" for name, _ in headers)
    return filter_headers(headers, _CHUNKED_RESPONSE_DROP if coded else HOP_BY_HOP)


def proxy_error(status: int, message: str) -> web.Response:
    """An error produced by the proxy itself, marked as such."""
    body = json.dumps({"error": {"message": message, "type": PROXY_ERROR_TYPE, "code": status}})
    return web.Response(status=status, text=body, content_type="application/json",
                        headers={PROXY_ERROR_HEADER: "1"})


@dataclass
class RelayResult:
    """What happened on the primary path (mutable: filled while relaying)."""

    status: int | None = None
    error: str | None = None  # "connect", "timeout", "reset", "bad_response", "pool_full"
    cancelled: bool = False  # the client went away
    capture_failed: bool = False
    t_end: float = 0.0


def decoding_tap(tap: ChunkTap, coding: str) -> ChunkTap:
    """`tap` behind a decoder of `coding` (gzip or deflate, zlib- or raw-framed)."""
    # 32 + 15: a gzip or zlib header, whichever comes; raw deflate is retried below.
    state = [zlib.decompressobj(47)]

    def decode(chunk: bytes, t: float) -> None:
        try:
            out = state[0].decompress(chunk)
        except zlib.error:
            if coding != "deflate" or state[0].unused_data or state[0].eof:
                raise
            state[0] = zlib.decompressobj(-15)  # deflate sent without its zlib header
            out = state[0].decompress(chunk)
        if out:
            tap(out, t)

    return decode


class _ClientSink:
    """Writes the primary's body to the client from the upstream's data_received.

    No task wakes up per chunk: each payload goes to the client's transport as it is
    parsed, framed the way aiohttp announced the response (chunked or raw), then to the
    capture tap. When the client reads slower than the primary writes, the primary's
    socket is paused until aiohttp's writer has drained.
    """

    __slots__ = ("chunked", "conn", "draining", "result", "tap", "transport", "writer")

    def __init__(self, conn: Http1Connection, writer: AbstractStreamWriter,
                 transport: asyncio.Transport, chunked: bool, tap: ChunkTap | None,
                 result: RelayResult) -> None:
        self.conn = conn
        self.writer = writer
        self.transport = transport
        self.chunked = chunked
        self.tap = tap
        self.result = result
        self.draining: asyncio.Task[None] | None = None

    def feed(self, payload: bytes, t: float) -> None:
        transport = self.transport
        if transport.is_closing():
            self.conn.fail(CLIENT_GONE)
            return
        if self.chunked:
            transport.write(b"%x\r\n%b\r\n" % (len(payload), payload))
        else:
            transport.write(payload)
        if self.tap is not None:
            try:
                self.tap(payload, t)
            except Exception:  # capture must never break the client
                log.exception("capture failed; relaying on without it")
                self.tap = None
                self.result.capture_failed = True
        if self.draining is None and transport.get_write_buffer_size() > WRITE_HIGH_BYTES:
            self.conn.pause_reading()
            self.draining = start_task(self._drain(), "client-drain")

    async def _drain(self) -> None:
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            return  # the client left: the next write (or aiohttp's cancel) ends it
        finally:
            self.draining = None
        self.conn.resume_reading()

    def close(self) -> None:
        if self.draining is not None:
            self.draining.cancel()


def _chunking(request: web.BaseRequest, out: web.StreamResponse) -> bool:
    """Whether the client's response is chunked (no length, HTTP/1.1): then ask for it."""
    if out.content_length is not None or request.version < HttpVersion11:
        return False
    out.enable_chunked_encoding()
    return True


def _head_error(upstream: Upstream, kind: str, result: RelayResult) -> web.Response:
    """The proxy's answer when no head came from the primary."""
    result.error = kind
    result.t_end = perf_counter()
    if kind == "timeout":
        return proxy_error(504, f"timed out connecting to the primary {upstream.url}")
    if kind == "pool_full":
        return proxy_error(503, f"no connection to the primary {upstream.url} came free in "
                                f"{upstream.pool.connect_timeout_s:g} s "
                                f"(--max-upstream-connections {upstream.pool.max_connections})")
    if kind == "connect":
        if upstream.should_warn():
            log.warning("primary %s unreachable", upstream.url)
        return proxy_error(502, f"primary {upstream.url} unreachable: connection refused or failed")
    if upstream.should_warn():
        log.warning("primary %s gave no valid answer: %s", upstream.url, kind)
    what = "closed the connection without an answer" if kind == "reset" \
        else "sent an invalid HTTP answer"
    return proxy_error(502, f"primary {upstream.url} {what}")


def _capture_tap(tap_for: TapFactory | None, content_type: str, coding: str,
                 upstream: Upstream, result: RelayResult) -> ChunkTap | None:
    """The tap for the primary's answer: decoded for the capture, or none at all."""
    if tap_for is None:
        return None
    if not coding:
        return tap_for(content_type)
    if coding in DECODED_CODINGS:
        return decoding_tap(tap_for(content_type), coding)
    result.capture_failed = True
    if upstream.should_warn():
        log.warning("primary %s answered with Content-Encoding %r: relayed, not compared "
                    "(only gzip and deflate are decoded for the capture)", upstream.url, coding)
    return None


def _relay_trailers(trailers: tuple[tuple[str, str], ...], writer: AbstractStreamWriter,
                    transport: asyncio.BaseTransport, chunked: bool, upstream: Upstream) -> None:
    """Send the primary's trailer fields after the last chunk, in place of aiohttp's end."""
    fields = filter_headers(trailers, _TRAILER_DROP)
    if chunked and isinstance(writer, StreamWriter) and not transport.is_closing():
        lines = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in fields.items())
        cast(asyncio.Transport, transport).write(b"0\r\n" + lines + b"\r\n")
        writer.chunked = False  # the end of the body is written: aiohttp adds none
    elif upstream.should_warn():
        log.warning("primary %s sent trailers %s; dropped (the client's answer is not chunked)",
                    upstream.url, sorted({k.lower() for k, _ in trailers}))


async def relay(
    request: web.Request,
    upstream: Upstream,
    body: bytes,
    headers: CIMultiDict[str],
    result: RelayResult,
    tap_for: TapFactory | None = None,
) -> web.StreamResponse:
    """Send the request to `upstream` and stream its answer to the client.

    `tap_for(content_type)` gives a `tap(chunk, t)` that sees every relayed chunk after
    it was written to the client (t: when it was read); a failing tap is dropped.
    On cancellation (client gone) the upstream connection is closed at once, which
    makes vLLM abort the generation, and the CancelledError propagates.
    """
    pool = upstream.pool
    try:
        conn = await pool.open(request.method, request.raw_path, headers, body)
    except asyncio.CancelledError:
        result.cancelled = True
        result.t_end = perf_counter()
        raise
    except UpstreamError as exc:
        return _head_error(upstream, exc.kind, result)
    head = conn.head
    assert head is not None
    result.status = head.status
    out = web.StreamResponse(status=head.status, reason=head.reason or None,
                             headers=response_headers(head.headers, head.chunked))
    sink: _ClientSink | None = None
    try:
        chunked = _chunking(request, out)
        try:
            writer = await out.prepare(request)
        except ValueError as exc:  # a header aiohttp refuses to send (control characters)
            conn.abort()
            result.status = None
            log.warning("primary %s sent a header the proxy cannot relay: %s", upstream.url, exc)
            return _head_error(upstream, "bad_response", result)
        transport = request.transport
        if writer is None or transport is None or transport.is_closing():
            raise ConnectionResetError("client gone")
        tap = _capture_tap(tap_for, head.content_type, head.content_encoding, upstream, result)
        sink = _ClientSink(conn, writer, cast(asyncio.Transport, transport), chunked, tap, result)
        await conn.attach(sink.feed)
        result.t_end = perf_counter()
        if conn.trailers:
            _relay_trailers(conn.trailers, writer, transport, chunked, upstream)
        pool.release(conn)
    except asyncio.CancelledError:
        result.cancelled = True
        result.t_end = perf_counter()
        conn.abort()
        raise
    except (UpstreamError, ConnectionError) as exc:
        result.t_end = perf_counter()
        conn.abort()
        transport = request.transport
        if isinstance(exc, ConnectionError) or exc.kind == CLIENT_GONE \
                or transport is None or transport.is_closing():
            result.cancelled = True
        else:
            # The primary broke mid-answer: end the client's connection the same way
            # (no clean end of body), as if it had talked to the primary directly.
            result.error = "reset"
            if upstream.should_warn():
                log.warning("primary %s failed mid-response: %s", upstream.url, exc.kind)
            transport.close()
    finally:
        if sink is not None:
            sink.close()
    return out
