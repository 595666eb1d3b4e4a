"""Incremental Server-Sent Events decoder (no I/O).

Bytes arrive in arbitrary pieces; `SSEDecoder.feed` returns the events completed
by each piece. Lines are split on bytes before decoding: CR and LF never occur
inside a multi-byte UTF-8 sequence, so a character split across two chunks is
simply held in the incomplete-line buffer until its line ends. Line endings
CRLF, LF and CR are all accepted, including a CRLF split between two chunks.
"""

from __future__ import annotations

from typing import NamedTuple

DONE = "[DONE]"


class SSEEvent(NamedTuple):
    """One dispatched event: `data` is the data lines joined with "\\n" (a tuple: cheap)."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    """Stateful decoder: feed it chunks, get completed events back."""

    __slots__ = (
        "_data", "_event", "_id", "_partial", "_partial_len", "_skip_lf", "comments",
        "max_line_bytes",
    )

    def __init__(self, max_line_bytes: int = 4 * 1024 * 1024) -> None:
        self._partial: list[bytes] = []  # pieces of the unterminated last line, joined once
        self._partial_len = 0
        self._skip_lf = False
        self._data: list[bytes] = []
        self._event: str | None = None
        self._id: str | None = None
        self.comments = 0
        self.max_line_bytes = max_line_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume `chunk`; return the events whose terminating blank line it completed.

        Raises ValueError when a single line grows beyond `max_line_bytes`.
        """
        return self._feed(chunk, False)  # type: ignore[return-value]

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Like `feed`, but only each event's data, undecoded (what a capture needs).

        A chunk made of whole one-line `data: ...` events (what vLLM writes) is split
        in one pass, one such event (one per chunk, as vLLM sends them) without a copy
        beyond its data; anything else takes the general line-by-line path.
        """
        if (not self._partial and not self._data and not self._skip_lf
                and chunk[:6] == b"data: " and chunk.find(b"\n") == len(chunk) - 2
                and chunk[-1] == 0x0A and b"\r" not in chunk
                and len(chunk) - 2 <= self.max_line_bytes):
            self._event = None
            return [chunk[6:-2]]
        if (chunk[-2:] == b"\n\n" and not self._partial and not self._data
                and not self._skip_lf and b"\r" not in chunk
                and len(chunk) <= self.max_line_bytes):
            out: list[bytes] = []
            for part in chunk[:-2].split(b"\n\n"):
                if part[:6] == b"data: " and b"\n" not in part:
                    out.append(part[6:])
                    self._event = None
                else:
                    out.extend(self._feed(part + b"\n\n", True))  # type: ignore[arg-type]
            return out
        return self._feed(chunk, True)  # type: ignore[return-value]

    def _feed(self, chunk: bytes, raw: bool) -> list[SSEEvent] | list[bytes]:
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:
            # Middle of a long line (e.g. prompt_token_ids of a long prompt): no rescans.
            self._partial.append(chunk)
            self._partial_len += len(chunk)
            if self._partial_len > self.max_line_bytes:
                raise ValueError(f"SSE line longer than {self.max_line_bytes} bytes")
            return []
        if self._partial:
            self._partial.append(chunk)
            buf = b"".join(self._partial)
        else:
            buf = chunk
        if b"\r" in buf:
            # A trailing CR ends its line now; an LF opening the next chunk belongs to it.
            self._skip_lf = buf[-1] == 0x0D
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        # A line is refused however it arrives: whole in one chunk or grown over several.
        if len(buf) > self.max_line_bytes and max(map(len, lines)) > self.max_line_bytes:
            raise ValueError(f"SSE line longer than {self.max_line_bytes} bytes")
        last = lines.pop()
        self._partial = [last] if last else []
        self._partial_len = len(last)
        events: list[SSEEvent] | list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(self._dispatch_raw() if raw else self._dispatch())  # type: ignore[arg-type]
                    data = self._data
                else:
                    self._event = None
                continue
            if line[:6] == b"data: ":
                data.append(line[6:])
            elif line[0] == 0x3A:  # ":" comment / keep-alive
                self.comments += 1
            else:
                self._field(line)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: dispatch an event left without its blank line (lenient)."""
        self._skip_lf = False
        events = self.feed(b"\n") if self._partial else []
        if self._data:
            events.append(self._dispatch())
        return events

    def flush_data(self) -> list[bytes]:
        """`flush` for `feed_data`: the data of an event left without its blank line."""
        self._skip_lf = False
        events = self.feed_data(b"\n") if self._partial else []
        if self._data:
            events.append(self._dispatch_raw())
        return events

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered that did not yet form a complete line or event."""
        return self._partial_len + sum(len(d) for d in self._data)

    def _field(self, line: bytes) -> None:
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            self._id = value.decode("utf-8", "replace")
        # "retry" and unknown fields are ignored, as the SSE spec says.

    def _dispatch(self) -> SSEEvent:
        event = self._event or "message"
        return SSEEvent(self._dispatch_raw().decode("utf-8", "replace"), event, self._id)

    def _dispatch_raw(self) -> bytes:
        data = self._data
        raw = data[0] if len(data) == 1 else b"\n".join(data)
        self._data = []
        self._event = None
        return raw
