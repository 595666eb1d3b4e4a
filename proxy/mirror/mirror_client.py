"""A lean HTTP/1.1 client for mirrored requests: answers go from the socket into a capture.

aiohttp's client queues every HTTP chunk in a StreamReader and wakes the reading task
once per chunk. A mirrored answer is never relayed, only captured, so here the protocol
de-chunks in `data_received` and hands all the payload that arrived to the capture in one
call, stamped with its arrival time: per SSE event that saves most of what reading costs.
One pool of keep-alive connections per mirror backend; every failure is a `MirrorError`
whose `kind` ends up in the capture ("connect", "reset", "bad_response", ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from time import perf_counter
from typing import cast
from urllib.parse import urlsplit

from multidict import CIMultiDict

Feed = Callable[[bytes, float], None]
OnHead = Callable[[int, str], Feed]  # (status, content type) -> where payload goes
Probe = Callable[[], "str | None"]  # an error that makes reading stop early, or None

MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_S = 4.0  # below uvicorn's (vLLM's) 5 s keep-alive: never reuse a closing socket
DOWN_S = 0.5  # after a refused connect, fail fast (no syscalls) for this long...
MAX_DOWN_S = 8.0  # ...doubled on each refusal in a row, up to this
_SIZE, _DATA, _CRLF, _TRAILER = range(4)


class MirrorError(Exception):
    """A mirrored request failed; `kind` is the short name recorded in the capture."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class MirrorConnection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.closed = False
        self.keep_alive = True
        self.idle_since = 0.0
        self._done: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = cast(asyncio.WriteTransport, transport)

    def start(self, request: bytes, on_head: OnHead, probe: Probe,
              max_bytes: int) -> asyncio.Future[int]:
        """Send `request`; the future gives the status once the whole answer was fed."""
        self._head = bytearray()
        self._buf = bytearray()
        self._in_head = True
        self._mode = ""
        self._left = 0
        self._state = _SIZE
        self._complete = False
        self._status = 0
        self._on_head, self._probe, self._max_bytes = on_head, probe, max_bytes
        self._feed: Feed | None = None
        self.received = 0
        self._done = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(request)
        return self._done

    def abort(self) -> None:
        self.keep_alive = False
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is not None and not self._done.done():
            # After the deliveries already scheduled, so none of the payload is lost.
            asyncio.get_running_loop().call_soon(self._lost)

    def _lost(self) -> None:
        if self._done is None or self._done.done():
            return
        if not self._in_head and self._mode == "close":
            self._finish()
        else:
            self._fail("reset")

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            self.abort()  # nothing asked: a confused server
            return
        try:
            if self._in_head:
                self._head += data
                end = self._head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._head) > MAX_HEAD_BYTES:
                        raise MirrorError("bad_response")
                    return
                data = bytes(self._head[end + 4:])
                self._parse_head(bytes(self._head[:end]))
                self._in_head = False
            payload = self._body(data) if data else b""
        except MirrorError as exc:
            self._fail(exc.kind)
            return
        except (ValueError, IndexError):
            self._fail("bad_response")
            return
        if payload or self._complete:
            # Delivered one loop pass later, as aiohttp hands the primary's chunks to the
            # relay: both sides are timed the same way, so neither looks faster.
            asyncio.get_running_loop().call_soon(self._deliver, payload, self._complete)

    def _deliver(self, payload: bytes, complete: bool) -> None:
        if self._done is None or self._done.done():
            return
        if payload and self._feed is not None:
            self.received += len(payload)
            self._feed(payload, perf_counter())
            error = self._probe()
            if error is not None or self.received > self._max_bytes:
                self._fail(error or "too_large")
                return
        if complete:
            self._finish()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise MirrorError("bad_response")
        status = int(rest[:3])
        if status < 200:
            raise MirrorError("bad_response")  # no Expect is ever sent: no 1xx expected
        close = version == b"HTTP/1.0"
        length: int | None = None
        chunked = False
        content_type = b""
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise MirrorError("bad_response")
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-type":
                content_type = value
            elif name == b"connection":
                close = b"close" in value.lower() or (close and b"keep-alive" not in value.lower())
        if status in (204, 304):
            self._mode, self._complete = "none", True
        elif chunked:
            self._mode = "chunked"
        elif length is not None:
            self._mode, self._left, self._complete = "length", length, length == 0
        else:
            self._mode, close = "close", True
        self.keep_alive = not close
        self._status = status
        self._feed = self._on_head(status, content_type.decode("latin-1"))

    def _body(self, data: bytes) -> bytes:
        if self._mode == "close":
            return data
        if self._mode == "length":
            if len(data) >= self._left:
                if len(data) > self._left:
                    self.keep_alive = False  # bytes beyond the answer: do not reuse
                data, self._left, self._complete = data[:self._left], 0, True
            else:
                self._left -= len(data)
            return data
        if self._mode != "chunked":
            return b""
        buf = self._buf
        if not buf and self._state == _SIZE:
            # The usual read: whole chunks ("size CRLF data CRLF"), no copies through buf.
            whole = self._whole_chunks(data)
            if whole is not None:
                return whole
        buf += data
        out: list[bytes] = []
        while buf:
            if self._state == _SIZE:
                i = buf.find(b"\r\n")
                if i < 0:
                    if len(buf) > 1024:
                        raise MirrorError("bad_response")
                    break
                size = int(bytes(buf[:i]).split(b";", 1)[0].strip(), 16)
                del buf[:i + 2]
                self._left, self._state = size, (_DATA if size else _TRAILER)
            elif self._state == _DATA:
                take = min(self._left, len(buf))
                out.append(bytes(buf[:take]))
                del buf[:take]
                self._left -= take
                if self._left == 0:
                    self._state = _CRLF
            elif self._state == _CRLF:
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise MirrorError("bad_response")
                del buf[:2]
                self._state = _SIZE
            else:
                i = buf.find(b"\r\n")
                if i < 0:
                    break
                del buf[:i + 2]
                if i == 0:
                    self._complete = True
                    break
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

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(self._status)
        if not self.keep_alive and self.transport is not None:
            self.transport.close()

    def _fail(self, kind: str) -> None:
        self.abort()
        if self._done is not None and not self._done.done():
            self._done.set_exception(MirrorError(kind))


class MirrorPool:
    """Keep-alive connections to one mirror backend (http or https)."""

    def __init__(self, url: str, connect_timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.host_header = parts.netloc
        self.base_path = parts.path.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[MirrorConnection] = []
        self._closed = False
        self._down_until = 0.0
        self._refusals = 0  # connects refused in a row

    async def _connection(self) -> MirrorConnection:
        now = time.monotonic()
        if now < self._down_until:
            raise MirrorError("connect")  # a dead shadow costs the proxy next to nothing
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < MAX_IDLE_S:
                return conn
            conn.abort()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                MirrorConnection, self.host, self.port, ssl=True if self.https else None,
            ), self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            self._down_until = time.monotonic() + min(MAX_DOWN_S, DOWN_S * 2**self._refusals)
            self._refusals = min(self._refusals + 1, 16)
            raise MirrorError("connect") from exc
        self._refusals = 0
        return conn

    @property
    def down(self) -> bool:
        """A recent connect was refused: requests fail at once, without a syscall."""
        return time.monotonic() < self._down_until

    def request_bytes(self, path: str, headers: CIMultiDict[str], body: bytes) -> bytes:
        head = [f"POST {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}",
                f"Content-Length: {len(body)}"]
        head.extend(f"{k}: {v}" for k, v in headers.items()
                    if k.lower() != "accept-encoding")  # identity: the capture reads it
        return "\r\n".join(head).encode("utf-8", "surrogateescape") + b"\r\n\r\n" + body

    async def post(self, path: str, headers: CIMultiDict[str], body: bytes, on_head: OnHead,
                   probe: Probe, max_bytes: int) -> int:
        """Send the request, feed the answer through `on_head`'s feed; return the status."""
        conn = await self._connection()
        done = conn.start(self.request_bytes(path, headers, body), on_head, probe, max_bytes)
        try:
            status = await done
        except BaseException:
            conn.abort()  # cancelled or failed: the backend stops generating
            raise
        if conn.keep_alive and not conn.closed and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        return status

    async def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
