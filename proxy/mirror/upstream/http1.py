"""A lean HTTP/1.1 client on asyncio Protocols: answers go from the socket straight to a feed.

aiohttp's client queues every HTTP chunk in a StreamReader and wakes the reading task
once per chunk. Here the protocol de-chunks in `data_received` and calls the request's
`feed(payload, t)` at once, with the arrival time: the primary relay writes the bytes
to the client from there, the mirror lane parses them into a capture, and no task wakes
up per SSE event. `Http1Pool.open()` sends a request and returns once the answer's head
is in; the body is held (reading paused) until `attach(feed)`, so the relay can send
the client its head first. One pool of keep-alive connections per (lane, backend);
every failure is an `UpstreamError` whose `kind` ends up in the record ("connect",
"timeout", "reset", "bad_response", ...).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import TypeVar, cast
from urllib.parse import urlsplit

from multidict import CIMultiDict

from proxy.credentials import basic_authorization
from proxy.mirror.upstream.stamped import open_stamped

log = logging.getLogger(__name__)

Feed = Callable[[bytes, float], None]
T = TypeVar("T")

MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_S = 4.0  # below uvicorn's (vLLM's) 5 s keep-alive: never reuse a closing socket
DOWN_S = 0.5  # mirror lane: after a refused connect, fail fast (no syscalls) for this long...
MAX_DOWN_S = 8.0  # ...doubled on each refusal in a row, up to this
_SIZE, _DATA, _CRLF, _TRAILER = range(4)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`await awaitable` in the current task, TimeoutError after `timeout_s`.

    Unlike asyncio.wait_for on Python 3.10/3.11 it starts no extra task: every mirrored
    request awaits under a deadline, and fewer live objects keep GC pauses short.
    """
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if expired:
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancel was ours
            if uncancel is not None:
                uncancel()
            raise asyncio.TimeoutError from None
        raise
    finally:
        handle.cancel()


class UpstreamError(Exception):
    """A request to a backend failed; `kind` is the short name recorded for it."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Head:
    """Status line and headers of an answer (names and values as sent, latin-1)."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    content_type: str  # media type only, lower case: "text/event-stream"
    chunked: bool  # the body came chunked (a Content-Length beside it is meaningless)


def _parse_head(head: bytes) -> tuple[Head, str, int, bool]:
    """(head, body mode, Content-Length, close after); raises UpstreamError on garbage."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    if not version.startswith(b"HTTP/1.") or len(rest) < 3 or not rest[:3].isdigit():
        raise UpstreamError("bad_response")
    status = int(rest[:3])
    close = version == b"HTTP/1.0"
    length: int | None = None
    chunked = False
    content_type = ""
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name, value = headers.pop()
            headers.append((name, f"{value} {line.strip().decode('latin-1')}"))
            continue
        raw_name, sep, raw_value = line.partition(b":")
        if not sep or not raw_name or raw_name != raw_name.strip():
            raise UpstreamError("bad_response")
        name = raw_name.decode("latin-1")
        value = raw_value.strip().decode("latin-1")
        headers.append((name, value))
        lower = name.lower()
        if lower == "content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise UpstreamError("bad_response")
            length = int(value)
        elif lower == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif lower == "content-type":
            content_type = value.split(";", 1)[0].strip().lower()
        elif lower == "connection":
            tokens = value.lower()
            close = "close" in tokens or (close and "keep-alive" not in tokens)
    if chunked:
        mode = "chunked"
    elif length is not None:
        mode = "length"
    else:
        mode, close = "close", True
    return (Head(status, rest[4:].decode("latin-1"), tuple(headers), content_type, chunked),
            mode, length or 0, close)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection to a backend; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = True
        self.idle_since = 0.0
        self.received = 0  # body bytes fed for the current request
        self.sent_at = 0.0  # perf_counter time the current request went to the socket
        self.head: Head | None = None
        self._head_waiter: asyncio.Future[Head] | None = None
        self._done: asyncio.Future[None] | None = None
        self._feed: Feed | None = None
        self._held: list[tuple[bytes, float]] = []
        self._error: str | None = None
        self._complete = False
        self._active = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    # -- driving a request ----------------------------------------------------------
    def send(self, request: bytes, no_body: bool = False) -> asyncio.Future[Head]:
        """Write `request`; the future gives the answer's head (1xx interim heads skipped).

        `no_body`: the request was HEAD, so the answer has no body whatever it says.
        """
        self._buf = bytearray()
        self._in_head = True
        self._no_body = no_body
        self._mode = ""
        self._left = 0
        self._state = _SIZE
        self._complete = False
        self._error = None
        self._feed = None
        self._held = []
        self._done = None
        self.head = None
        self.received = 0
        self._active = True
        loop = asyncio.get_running_loop()
        self._head_waiter = loop.create_future()
        assert self.transport is not None
        self.sent_at = perf_counter()
        self.transport.write(request)
        return self._head_waiter

    def attach(self, feed: Feed) -> asyncio.Future[None]:
        """Start feeding the body (what arrived with the head first); the future ends with it."""
        self._done = asyncio.get_running_loop().create_future()
        held, self._held = self._held, []
        self._feed = feed
        for payload, t in held:
            if not self._deliver(payload, t):
                return self._done
        self.resume_reading()  # paused when the head came (a no-op if it never was)
        if self._error is not None or self._complete:
            self._settle()
        return self._done

    def fail(self, kind: str) -> None:
        """Stop this request (a feed that saw enough, a client that left): abort and fail it."""
        self._error = self._error or kind
        self.abort()
        self._settle()

    def abort(self) -> None:
        self.keep_alive = False
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    @property
    def reusable(self) -> bool:
        return (self._complete and self._error is None and self.keep_alive
                and not self.closed)

    # -- protocol callbacks ---------------------------------------------------------
    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._active:
            return
        if not self._in_head and self._mode == "close" and self._error is None:
            self._complete = True  # a close-delimited body ends with the connection
        elif not self._complete:
            self._error = self._error or "reset"
        self._settle()

    def data_received(self, data: bytes) -> None:
        self.data_received_at(data, perf_counter())

    def data_received_at(self, data: bytes, t: float) -> None:
        """`data` that arrived at perf_counter time `t` (stamped transports: the kernel's)."""
        if not self._active or self._complete or self._error is not None:
            if not self._active:
                self.abort()  # nothing asked: a confused server
            return
        try:
            if self._in_head:
                rest = self._read_head(data)
                if rest is None:
                    return
                data = rest
            payload = self._body(data) if data else b""
        except UpstreamError as exc:
            self.fail(exc.kind)
            return
        except (ValueError, IndexError):
            self.fail("bad_response")
            return
        if payload:
            if self._feed is None:
                self._held.append((payload, t))
            elif not self._deliver(payload, t):
                return
        if self._complete and self._feed is not None:
            self._settle()

    def _read_head(self, data: bytes) -> bytes | None:
        """Collect the head; the bytes after it, or None while it is incomplete."""
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise UpstreamError("bad_response")
                return None
            head, mode, length, close = _parse_head(bytes(self._buf[:end]))
            del self._buf[:end + 4]
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise UpstreamError("bad_response")  # no Upgrade is ever sent
                continue  # an interim answer (100 Continue, 103 Early Hints): skip it
            break
        rest = bytes(self._buf)
        self._buf = bytearray()
        self._in_head = False
        if self._no_body or head.status in (204, 304):
            mode = "none"
            if rest:
                close = True  # bytes where no body may be: do not reuse
        self._mode, self._left = mode, length
        self.keep_alive = not close
        self._complete = mode == "none" or (mode == "length" and length == 0)
        if mode == "length" and len(rest) > length:
            self.keep_alive = False  # bytes beyond the answer: do not reuse
        self.head = head
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_result(head)
        if not self._complete:
            self.pause_reading()  # until attach(): the body waits in the kernel
        return rest

    def _deliver(self, payload: bytes, t: float) -> bool:
        """Feed `payload`; False when the feed stopped the request."""
        self.received += len(payload)
        assert self._feed is not None
        try:
            self._feed(payload, t)
        except Exception:
            log.exception("feeding an answer failed")
            self.fail("internal")
        return self._error is None

    def _settle(self) -> None:
        """Resolve the waiters once the answer is complete or failed."""
        if self._complete or self._error is not None:
            self._active = False
        waiter = self._head_waiter
        if self._error is not None and waiter is not None and not waiter.done():
            waiter.set_exception(UpstreamError(self._error))
        done = self._done
        if done is None or done.done():
            return
        if self._error is not None:
            done.set_exception(UpstreamError(self._error))
        elif self._complete:
            done.set_result(None)
            if not self.keep_alive and self.transport is not None:
                self.transport.close()

    def _body(self, data: bytes) -> bytes:
        mode = self._mode
        if mode == "close":
            return data
        if mode == "length":
            if len(data) >= self._left:
                data, self._left, self._complete = data[:self._left], 0, True
            else:
                self._left -= len(data)
            return data
        if mode != "chunked":
            return b""
        if self._buf:  # the unfinished size line (or CRLF, trailer) of the last read
            data = bytes(self._buf) + data
            self._buf = bytearray()
        elif self._state == _SIZE:
            # The usual read: whole chunks ("size CRLF data CRLF"), one slice per chunk.
            whole = self._whole_chunks(data)
            if whole is not None:
                return whole
        return self._dechunk(data)

    def _dechunk(self, data: bytes) -> bytes:
        """De-chunk `data` from wherever the last read stopped, in one pass over it.

        Positions move through `data` (no copies of what is left, so a read of many
        chunks costs linear time); an unfinished size line, CRLF or trailer line is
        kept in `_buf` for the next read.
        """
        out: list[bytes] = []
        pos, end = 0, len(data)
        state, left = self._state, self._left
        while pos < end:
            if state == _DATA:
                stop = min(pos + left, end)
                out.append(data[pos:stop])
                left -= stop - pos
                pos = stop
                if left == 0:
                    state = _CRLF
            elif state == _CRLF:
                if end - pos < 2:
                    if data[pos:] != b"\r":
                        raise UpstreamError("bad_response")
                    self._buf += data[pos:]
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise UpstreamError("bad_response")
                pos += 2
                state = _SIZE
            elif state == _SIZE:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if end - pos > 1024:
                        raise UpstreamError("bad_response")
                    self._buf += data[pos:]
                    break
                left = int(data[pos:i].split(b";", 1)[0].strip(), 16)
                if left < 0:
                    raise UpstreamError("bad_response")
                pos = i + 2
                state = _DATA if left else _TRAILER
            else:  # trailer lines, then the blank line that ends the body
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if end - pos > MAX_HEAD_BYTES:
                        raise UpstreamError("bad_response")
                    self._buf += data[pos:]
                    break
                if i == pos:
                    self._complete = True
                    if i + 2 < end:
                        self.keep_alive = False  # bytes beyond the answer: do not reuse
                    break
                pos = i + 2
        self._state, self._left = state, left
        return out[0] if len(out) == 1 else b"".join(out)

    def _whole_chunks(self, data: bytes) -> bytes | None:
        """The payload when `data` is exactly whole non-final chunks; else None."""
        pieces: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            i = data.find(b"\r\n", pos)
            line = data[pos:i]
            if i < 0 or len(line) > 8 or not line.isalnum():
                return None  # unfinished size line, chunk extension, ...: general path
            size = int(line, 16)
            start = i + 2
            stop = start + size
            if size <= 0 or stop + 2 > end or data[stop:stop + 2] != b"\r\n":
                return None
            pieces.append(data[start:stop])
            pos = stop + 2
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class Http1Pool:
    """Keep-alive connections to one backend (http or https) for one lane.

    `fail_fast`: after a refused connect, fail at once for a while (doubling on each
    refusal in a row): right for the mirror lane, where a dead shadow must cost next to
    nothing; the primary lane always tries, so a restarted primary is used at once.
    """

    def __init__(self, url: str, connect_timeout_s: float = 10.0,
                 fail_fast: bool = False, stamped: bool = False) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc.rpartition("@")[2]  # never the userinfo
        # A URL's user:password goes as Basic auth, in place of a client's Authorization.
        self.authorization = basic_authorization(url)
        self.base_path = parts.path.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self.fail_fast = fail_fast
        # Time reads by the kernel's arrival stamps (proxy.mirror.upstream.stamped): plain TCP only.
        self.stamped = stamped and not self.https
        self._idle: list[Http1Connection] = []
        self._closed = False
        self._down_until = 0.0
        self._refusals = 0  # connects refused in a row

    @property
    def down(self) -> bool:
        """A recent connect was refused: requests fail at once, without a syscall."""
        return self.fail_fast and time.monotonic() < self._down_until

    def request_bytes(self, method: str, path: str, headers: CIMultiDict[str],
                      body: bytes) -> bytes:
        """The request on the wire: our Host and Content-Length, the caller's other headers."""
        head = [f"{method} {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}"]
        if body or method in _BODY_METHODS:
            head.append(f"Content-Length: {len(body)}")
        if self.authorization is None:
            head.extend(f"{k}: {v}" for k, v in headers.items())
        else:
            head.append(f"Authorization: {self.authorization}")
            head.extend(f"{k}: {v}" for k, v in headers.items() if k.lower() != "authorization")
        return "\r\n".join(head).encode("utf-8", "surrogateescape") + b"\r\n\r\n" + body

    def _idle_connection(self) -> Http1Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < MAX_IDLE_S:
                return conn
            conn.abort()
        return None

    async def _new_connection(self) -> Http1Connection:
        if self.down:
            raise UpstreamError("connect")  # a dead shadow costs the proxy next to nothing
        loop = asyncio.get_running_loop()
        try:
            if self.stamped:
                _, conn = await within(open_stamped(Http1Connection, self.host, self.port),
                                       self.connect_timeout_s)
            else:
                _, conn = await within(loop.create_connection(
                    Http1Connection, self.host, self.port, ssl=True if self.https else None,
                ), self.connect_timeout_s)
        except asyncio.TimeoutError as exc:
            raise UpstreamError("timeout") from exc
        except OSError as exc:
            if self.fail_fast:
                self._down_until = time.monotonic() + min(MAX_DOWN_S, DOWN_S * 2**self._refusals)
                self._refusals = min(self._refusals + 1, 16)
            raise UpstreamError("connect") from exc
        self._refusals = 0
        return conn

    async def open(self, method: str, path: str, headers: CIMultiDict[str],
                   body: bytes) -> Http1Connection:
        """Send a request; return its connection once the answer's head is in (`conn.head`).

        The body waits until `conn.attach(feed)`; then give the connection back with
        `release()` (or `conn.abort()` it). A reused keep-alive connection that the
        backend closed before answering anything is retried once on a new one: the
        backend never saw that request.
        """
        request = self.request_bytes(method, path, headers, body)
        conn = self._idle_connection()
        for attempt in (0, 1):
            reused = conn is not None
            if conn is None:
                conn = await self._new_connection()
            try:
                await conn.send(request, no_body=method == "HEAD")
                return conn
            except UpstreamError as exc:
                conn.abort()
                if not (reused and attempt == 0 and exc.kind == "reset"):
                    raise
                conn = None
            except BaseException:
                conn.abort()  # cancelled: the backend stops
                raise
        raise AssertionError("unreachable")

    def release(self, conn: Http1Connection) -> None:
        """Give back a connection whose answer was read to the end (else it is closed)."""
        if conn.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.abort()

    async def fetch(self, method: str, path: str, headers: CIMultiDict[str], body: bytes,
                    feed_for: Callable[[Http1Connection], Feed]) -> Head:
        """The whole exchange: open, feed the body through `feed_for(conn)`'s feed, release.

        Cancellation or any failure aborts the connection (the backend stops generating).
        """
        conn = await self.open(method, path, headers, body)
        try:
            await conn.attach(feed_for(conn))
        except BaseException:
            conn.abort()
            raise
        self.release(conn)
        assert conn.head is not None
        return conn.head

    async def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
