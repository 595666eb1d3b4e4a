"""One keep-alive HTTP/1.1 connection of the load generator, parsing just enough of a response.

It de-chunks the body (or follows Content-Length), stamps the arrival of the first SSE
event whose `choices` is not empty (TTFT as `vllm bench serve` takes it) and counts
`data:` events after it, markers split across reads included. No JSON is parsed except
by the regular expression that finds the first choice.
"""

from __future__ import annotations

import asyncio
import re
import time

_CHOICES = re.compile(rb'"choices":\s*\[\s*\{')


class SSEStream(asyncio.Protocol):
    """One connection; one request at a time; parse just enough of the response."""

    def __init__(self, request: bytes, counter: list[int]) -> None:
        self._request = request
        self._counter = counter  # shared [events, streams streaming now] of the process
        self._transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._done: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._buf = b""
        self._in_body = False
        self._chunk_left = 0  # bytes of chunk data still to come
        self._chunked = True
        self._length_left = -1
        self._ttft_seen = False
        self._streaming = False
        self._sse = b""
        self._carry = b""
        self.status = 0
        self.t_start = 0.0
        self.t_first = 0.0
        self.events = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._stop_streaming()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._done is not None and not self._done.done():
            self._done.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    def send(self) -> asyncio.Future[None]:
        self._reset()
        self._done = asyncio.get_running_loop().create_future()
        if self._transport is None:
            self._done.set_exception(ConnectionError("not connected"))
            return self._done
        self.t_start = time.perf_counter()
        self._transport.write(self._request)
        return self._done

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._in_body:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self._buf[:end].lower()
            self.status = int(head[9:12])
            self._chunked = b"transfer-encoding: chunked" in head
            match = re.search(rb"content-length:\s*(\d+)", head)
            self._length_left = int(match.group(1)) if match else -1
            self._in_body = True
            data, self._buf = self._buf[end + 4 :], b""
        if self._chunked:
            self._feed_chunked(data)
        else:
            self._payload(data)
            self._length_left -= len(data)
            if self._length_left <= 0:
                self._finish()

    def _feed_chunked(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        pos, n = 0, len(buf)
        while pos < n:
            if self._chunk_left > 0:
                take = min(self._chunk_left, n - pos)
                self._payload(buf[pos : pos + take])
                self._chunk_left -= take
                pos += take
                if self._chunk_left == 0:
                    self._chunk_left = -2  # the CRLF after the data
                continue
            if self._chunk_left < 0:
                skip = min(-self._chunk_left, n - pos)
                self._chunk_left += skip
                pos += skip
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self._buf = buf[pos:]
                return
            size = int(buf[pos:eol].split(b";")[0], 16)
            pos = eol + 2
            if size == 0:
                self._finish()
                return
            self._chunk_left = size

    def _payload(self, data: bytes) -> None:
        if not self._ttft_seen:
            self._sse += data
            match = _CHOICES.search(self._sse)
            if match is None:
                return
            self.t_first = time.perf_counter()
            self._ttft_seen = True
            self._streaming = True
            self._counter[1] += 1
            start = self._sse.rfind(b"data:", 0, match.start())
            data, self._sse = self._sse[max(start, 0) :], b""
        # A marker split across reads is counted once: keep len(marker) - 1 bytes back.
        carry = self._carry
        found = (carry[-4:] + data).count(b"data:") - (carry + data).count(b"[DONE]")
        self.events += found
        self._counter[0] += found
        self._carry = (carry + data)[-5:]

    def _stop_streaming(self) -> None:
        if self._streaming:
            self._streaming = False
            self._counter[1] -= 1

    def _finish(self) -> None:
        self._stop_streaming()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
