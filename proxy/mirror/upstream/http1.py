"""A lean HTTP/1.1 client on asyncio Protocols: answers go from the socket straight to a feed.

aiohttp's client queues every HTTP chunk in a StreamReader and wakes the reading task
once per chunk. Here the protocol de-chunks in `data_received` and calls the request's
`feed(payload, t)` at once, with the arrival time: the primary relay writes the bytes
to the client from there, the mirror lane parses them into a capture, and no task wakes
up per SSE event. `Http1Pool.open()` sends a request and returns once the answer's head
is in; the body is held (reading paused) until `attach(feed)`, so the relay can send
the client its head first. One pool of keep-alive connections per (lane, backend);
every failure is an `UpstreamError` whose `kind` ends up in the record ("connect",
"timeout", "reset", "bad_response", "pool_full", ...). What the bytes mean (head, body
framing, chunks) is decided without I/O in `proxy.mirror.upstream.framing`; this module only moves
them. A pool holds at most `max_connections` connections; a request beyond them waits
for one (up to the connect timeout).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TypeVar, cast
from urllib.parse import urlsplit

from multidict import CIMultiDict

from proxy.credentials import basic_authorization
from proxy.mirror.upstream.framing import (
    MAX_HEAD_BYTES,
    BodyReader,
    FramingError,
    Head,
    body_framing,
    parse_head,
)
from proxy.mirror.upstream.stamped import open_stamped

log = logging.getLogger(__name__)

Feed = Callable[[bytes, float], None]
# Asked once per new connection, after it is established and before any byte is sent
# on it: None when the peer is the backend the route means, else why it is not.
ConfirmPeer = Callable[[], Awaitable["str | None"]]
T = TypeVar("T")

MAX_IDLE_S = 4.0  # below uvicorn's (vLLM's) 5 s keep-alive: never reuse a closing socket
DOWN_S = 0.5  # mirror lane: after a refused connect, fail fast (no syscalls) for this long...
MAX_DOWN_S = 8.0  # ...doubled on each refusal in a row, up to this
DEFAULT_MAX_CONNECTIONS = 1024  # per pool: above any engine's concurrent requests
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


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection to a backend; one request at a time."""

    def __init__(self, on_close: Callable[[], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = True
        self.idle_since = 0.0
        self.received = 0  # body bytes fed for the current request
        self.sent_at = 0.0  # perf_counter time the current request went to the socket
        self.head: Head | None = None
        self._on_close = on_close  # the pool's: a slot is free again
        self._head_waiter: asyncio.Future[Head] | None = None
        self._done: asyncio.Future[None] | None = None
        self._feed: Feed | None = None
        self._held: list[tuple[bytes, float]] = []
        self._reader: BodyReader | None = None
        self._error: str | None = None
        self._complete = False
        self._active = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    @property
    def trailers(self) -> tuple[tuple[str, str], ...]:
        """The trailer fields of a chunked answer read to its end (else empty)."""
        return self._reader.trailers if self._reader is not None else ()

    # -- driving a request ----------------------------------------------------------
    def send(self, request: bytes, method: str = "GET") -> asyncio.Future[Head]:
        """Write `request` (a `method` request); the future gives the answer's head (1xx
        interim heads skipped)."""
        self._buf = bytearray()
        self._method = method
        self._reader = None
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
        self._mark_closed()
        if self.transport is not None:
            self.transport.abort()

    def _mark_closed(self) -> None:
        if not self.closed:
            self.closed = True
            if self._on_close is not None:
                self._on_close()

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
        self._mark_closed()
        if not self._active:
            return
        reader = self._reader
        if reader is not None and reader.kind == "close" and self._error is None:
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
            elif self._complete and data:
                self.keep_alive = False  # bytes beyond the answer: do not reuse
            return
        reader = self._reader
        try:
            if reader is None:
                rest = self._read_head(data)
                if rest is None:
                    return
                data, reader = rest, self._reader
                assert reader is not None
            payload = reader.feed(data) if data else b""
        except UpstreamError as exc:
            self.fail(exc.kind)
            return
        except FramingError:
            self.fail("bad_response")
            return
        if reader.complete:
            self._complete = True
            if reader.overrun:
                self.keep_alive = False  # bytes beyond the answer: do not reuse
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
            head = parse_head(bytes(self._buf[:end]))
            del self._buf[:end + 4]
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise UpstreamError("bad_response")  # no Upgrade is ever sent
                continue  # an interim answer (100 Continue, 103 Early Hints): skip it
            break
        rest = bytes(self._buf)
        self._buf = bytearray()
        framing = body_framing(self._method, head.status, head.version, head.headers)
        self._reader = reader = BodyReader(framing)
        self.keep_alive = framing.keep_alive
        self.head = head
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_result(head)
        if not reader.complete:
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
                self._mark_closed()
                self.transport.close()


class Http1Pool:
    """Keep-alive connections to one backend (http or https) for one lane.

    `fail_fast`: after a refused connect, fail at once for a while (doubling on each
    refusal in a row): right for the mirror lane, where a dead shadow must cost next to
    nothing; the primary lane always tries, so a restarted primary is used at once.
    `confirm`: each new connection is confirmed before its first request (the peer that
    accepted it is known, not just its address): one refused is closed unused, the
    request fails "unconfirmed" and the pool fails fast as after a refused connect.
    """

    def __init__(self, url: str, connect_timeout_s: float = 10.0,
                 fail_fast: bool = False, stamped: bool = False,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, identity: bool = False,
                 confirm: ConfirmPeer | None = None) -> None:
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
        self.max_connections = max_connections
        # Answers this pool reads are parsed, not relayed: ask for them without a
        # Content-Encoding (gzip from a gateway would make a capture garbage).
        self.identity = identity
        self.confirm = confirm
        self.connections = 0  # open or opening, idle or in use
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle: list[Http1Connection] = []
        self._closed = False
        self._down_until = 0.0
        self._refusals = 0  # connects refused in a row
        self.down_kind = "connect"  # why it is down: "connect" or "unconfirmed"

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
        drop: set[str] = set()
        if self.authorization is not None:
            head.append(f"Authorization: {self.authorization}")
            drop.add("authorization")
        if self.identity:
            head.append("Accept-Encoding: identity")
            drop.add("accept-encoding")
        head.extend(f"{k}: {v}" for k, v in headers.items() if not drop or k.lower() not in drop)
        return "\r\n".join(head).encode("utf-8", "surrogateescape") + b"\r\n\r\n" + body

    def _idle_connection(self) -> Http1Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < MAX_IDLE_S:
                return conn
            conn.abort()
        return None

    def _freed(self) -> None:
        """A connection closed: its slot goes to the first request waiting for one."""
        self.connections -= 1
        self._wake()

    def _wake(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connection(self, fresh: bool) -> Http1Connection:
        """An idle connection (unless `fresh`), else a new one; at the cap, wait for a slot."""
        while True:
            conn = None if fresh else self._idle_connection()
            if conn is not None:
                return conn
            if self.connections < self.max_connections:
                return await self._new_connection()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await within(waiter, self.connect_timeout_s)
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken just as it gave up: the slot goes to the next
                else:
                    waiter.cancel()
                if isinstance(exc, asyncio.TimeoutError):
                    raise UpstreamError("pool_full") from None
                raise

    async def _new_connection(self) -> Http1Connection:
        if self.down:  # a dead shadow costs the proxy next to nothing
            raise UpstreamError(self.down_kind)
        loop = asyncio.get_running_loop()
        self.connections += 1  # the slot is taken while connecting

        made: list[Http1Connection] = []

        def factory() -> Http1Connection:
            made.append(Http1Connection(self._freed))  # its close frees the slot, once
            return made[0]

        try:
            if self.stamped:
                _, conn = await within(open_stamped(factory, self.host, self.port),
                                       self.connect_timeout_s)
            else:
                _, conn = await within(loop.create_connection(
                    factory, self.host, self.port, ssl=True if self.https else None,
                ), self.connect_timeout_s)
        except BaseException as exc:
            if made:
                made[0].abort()
            else:
                self._freed()
            if isinstance(exc, asyncio.TimeoutError):
                raise UpstreamError("timeout") from exc
            if isinstance(exc, OSError):
                self._refused("connect")
                raise UpstreamError("connect") from exc
            raise
        if self.confirm is not None:
            await self._confirmed(conn)
        self._refusals = 0
        return conn

    async def _confirmed(self, conn: Http1Connection) -> None:
        """`conn` once `confirm` says its peer is the backend meant; closed unused if not."""
        assert self.confirm is not None
        try:
            refusal = await within(self.confirm(), self.connect_timeout_s)
        except asyncio.TimeoutError:
            refusal = f"not confirmed within {self.connect_timeout_s:g} s"
        except BaseException:
            conn.abort()
            raise
        if refusal is not None:
            conn.abort()
            if self._refused("unconfirmed"):  # once per outage, not once per request
                log.warning("%s:%s: connection closed unused: %s", self.host, self.port,
                            refusal)
            raise UpstreamError("unconfirmed")

    def _refused(self, kind: str) -> bool:
        """Fail fast for a while (mirror lane); True for the first failure of its kind in
        a row."""
        first = self._refusals == 0 or self.down_kind != kind
        self.down_kind = kind
        if self.fail_fast:
            self._down_until = time.monotonic() + min(MAX_DOWN_S, DOWN_S * 2**self._refusals)
            self._refusals = min(self._refusals + 1, 16)
        return first

    async def open(self, method: str, path: str, headers: CIMultiDict[str],
                   body: bytes) -> Http1Connection:
        """Send a request; return its connection once the answer's head is in (`conn.head`).

        The body waits until `conn.attach(feed)`; then give the connection back with
        `release()` (or `conn.abort()` it). A reused keep-alive connection that the
        backend closed before answering anything is retried once on a new one: the
        backend never saw that request.
        """
        request = self.request_bytes(method, path, headers, body)
        for attempt in (0, 1):
            conn = await self._connection(fresh=attempt == 1)
            reused = conn.idle_since > 0.0
            try:
                await conn.send(request, method)
                return conn
            except UpstreamError as exc:
                conn.abort()
                if not (reused and attempt == 0 and exc.kind == "reset"):
                    raise
            except BaseException:
                conn.abort()  # cancelled: the backend stops
                raise
        raise AssertionError("unreachable")

    def release(self, conn: Http1Connection) -> None:
        """Give back a connection whose answer was read to the end (else it is closed)."""
        if conn.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            self._wake()
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
        for waiter in self._slot_waiters:
            if not waiter.done():  # a failed request, not a cancelled task
                waiter.set_exception(UpstreamError("connect"))
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
