"""HTTP/1.1 answers without I/O: the head parsed strictly, the body's framing decided in one
place, and the body read out of whatever pieces the socket gives.

`body_framing` is RFC 9112 section 6.3 for answers, the way h11's `_body_framing` reads it:
no body for HEAD, 1xx, 204 and 304; else Transfer-Encoding (chunked when it is the last
coding, read to close when it is not); else Content-Length; else read to close. Where the
two differ, this module follows the RFC and is stricter about reuse (h11 refuses every
coding but a bare `chunked`; the differences are listed in tests/mirror/test_http1_h11.py).

`BodyReader.feed(data)` returns the payload in `data` (de-chunked) in one pass: whole
chunks are sliced out without copying the rest, so an SSE stream costs one call per read,
not one per event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

BodyKind = Literal["none", "length", "chunked", "close"]
Fields = tuple[tuple[str, str], ...]

MAX_HEAD_BYTES = 64 * 1024
MAX_SIZE_LINE_BYTES = 1024
_SIZE, _DATA, _CRLF, _TRAILER = range(4)

# The grammar h11 checks (RFC 9112 sections 4, 5 and 7.1), as compiled patterns.
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_FIELD = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)"
                    rb"[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*")
_LENGTH = re.compile(r"[0-9]{1,20}")
_OWS = b" \t"
_HEX = b"0123456789abcdefABCDEF"


class FramingError(ValueError):
    """The answer breaks HTTP/1.1 framing (the client records it as "bad_response")."""


@dataclass(frozen=True, slots=True)
class Head:
    """Status line and headers of an answer (names and values as sent, latin-1)."""

    status: int
    reason: str
    headers: Fields
    content_type: str  # media type only, lower case: "text/event-stream"
    chunked: bool  # the body came chunked (a Content-Length beside it is meaningless)
    version: str = "1.1"
    content_encoding: str = ""  # lower case; "" for none or identity


@dataclass(frozen=True, slots=True)
class Framing:
    """How the body of one answer is delimited, and whether its connection may be reused."""

    body: BodyKind
    length: int = 0  # for "length"
    keep_alive: bool = True


def parse_fields(lines: Iterable[bytes]) -> Fields:
    """Header (or trailer) lines -> (name, value) pairs; obsolete line folding is joined."""
    joined: list[bytes] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            if not joined:
                raise FramingError("a continuation line before any header")
            joined[-1] += b" " + line.lstrip(_OWS)
        else:
            joined.append(line)
    fields: list[tuple[str, str]] = []
    for line in joined:
        match = _FIELD.fullmatch(line)
        if match is None:
            raise FramingError(f"a malformed header line {line[:80]!r}")
        fields.append((match[1].decode("latin-1"), match[2].decode("latin-1")))
    return tuple(fields)


def _tokens(fields: Fields, name: str) -> list[str]:
    """The comma-separated, lower-cased tokens of every `name` field, in order."""
    return [token.strip().lower() for key, value in fields if key.lower() == name
            for token in value.split(",") if token.strip()]


def parse_head(raw: bytes) -> Head:
    """The head of an answer (without its blank line); FramingError on anything malformed."""
    status_line, _, rest = raw.partition(b"\r\n")
    match = _STATUS_LINE.fullmatch(status_line)
    if match is None or int(match[2]) < 100:
        raise FramingError(f"a malformed status line {status_line[:80]!r}")
    fields = parse_fields(rest.split(b"\r\n")) if rest else ()
    content_type = next((v for k, v in fields if k.lower() == "content-type"), "")
    codings = [c for c in _tokens(fields, "content-encoding") if c != "identity"]
    transfer = _tokens(fields, "transfer-encoding")
    return Head(int(match[2]), (match[3] or b"").decode("latin-1"), fields,
                content_type.split(";", 1)[0].strip().lower(),
                bool(transfer) and transfer[-1] == "chunked", f"1.{match[1].decode()}",
                ", ".join(codings))


def body_framing(method: str, status: int, version: str, headers: Sequence[tuple[str, str]]
                 ) -> Framing:
    """The body framing of an answer to `method` (RFC 9112 section 6.3), and keep-alive."""
    fields = tuple(headers)
    keep_alive = version != "1.0" and "close" not in _tokens(fields, "connection")
    lengths = {part.strip() for key, value in fields if key.lower() == "content-length"
               for part in value.split(",")}
    if len(lengths) > 1 or any(_LENGTH.fullmatch(v) is None for v in lengths):
        raise FramingError(f"an invalid Content-Length {sorted(lengths)!r}")
    if method == "HEAD" or status < 200 or status in (204, 304):
        return Framing("none", 0, keep_alive)
    transfer = _tokens(fields, "transfer-encoding")
    if transfer:
        if transfer[-1] != "chunked":
            return Framing("close", 0, False)  # rule 4: only the close ends this body
        if transfer.count("chunked") > 1:
            raise FramingError("chunked applied twice")
        # Rule 3: Transfer-Encoding beside Content-Length may be a smuggling attempt: read
        # by the chunks and never reuse the connection.
        return Framing("chunked", 0, keep_alive and not lengths)
    if lengths:
        return Framing("length", int(lengths.pop()), keep_alive)
    return Framing("close", 0, False)


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line: 1*HEXDIG, then an optional extension."""
    match = _CHUNK_SIZE.fullmatch(line)
    if match is None:
        raise FramingError(f"a malformed chunk size line {line[:40]!r}")
    return int(match[1], 16)


class BodyReader:
    """Reads one body framed as `framing` says, from pieces split anywhere.

    `feed(data)` returns the payload in `data`; `complete` is set at the end of the body,
    `overrun` when bytes came beyond it (the connection cannot be reused), `trailers` holds
    a chunked body's trailer fields.
    """

    __slots__ = ("_buf", "_left", "_state", "_trailer_lines", "complete", "kind", "overrun",
                 "trailers")

    def __init__(self, framing: Framing) -> None:
        self.kind = framing.body
        self._left = framing.length
        self._state = _SIZE
        self._buf = b""  # an unfinished size line, CRLF or trailer line of the last read
        self._trailer_lines: list[bytes] = []
        self.complete = self.kind == "none" or (self.kind == "length" and not self._left)
        self.overrun = False
        self.trailers: Fields = ()

    def feed(self, data: bytes) -> bytes:
        if self.complete:
            self.overrun = self.overrun or bool(data)
            return b""
        kind = self.kind
        if kind == "close":
            return data
        if kind == "length":
            if len(data) >= self._left:
                self.overrun = len(data) > self._left
                data, self._left, self.complete = data[:self._left], 0, True
            else:
                self._left -= len(data)
            return data
        if self._buf:
            data, self._buf = self._buf + data, b""
        elif self._state == _SIZE:
            whole = _whole_chunks(data)  # the usual read: whole chunks, one slice per chunk
            if whole is not None:
                return whole
        return self._dechunk(data)

    def _dechunk(self, data: bytes) -> bytes:
        """De-chunk `data` from wherever the last read stopped, in one pass over it."""
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
                        raise FramingError("a chunk without its CRLF")
                    self._buf = data[pos:]
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise FramingError("a chunk without its CRLF")
                pos += 2
                state = _SIZE
            else:
                i = data.find(b"\r\n", pos)
                limit = MAX_SIZE_LINE_BYTES if state == _SIZE else MAX_HEAD_BYTES
                if i < 0:
                    if end - pos > limit:
                        raise FramingError("a chunk size or trailer line too long")
                    self._buf = data[pos:]
                    break
                line, pos = data[pos:i], i + 2
                if state == _SIZE:
                    left = chunk_size(line)
                    state = _DATA if left else _TRAILER
                elif line:
                    self._trailer_lines.append(line)
                    if sum(map(len, self._trailer_lines)) > MAX_HEAD_BYTES:
                        raise FramingError("trailers longer than a head may be")
                else:
                    self.trailers = parse_fields(self._trailer_lines)
                    self.complete = True
                    self.overrun = pos < end
                    break
        self._state, self._left = state, left
        return out[0] if len(out) == 1 else b"".join(out)


def _whole_chunks(data: bytes) -> bytes | None:
    """The payload when `data` is exactly whole non-final chunks with bare sizes; else None."""
    pieces: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end:
        i = data.find(b"\r\n", pos)
        line = data[pos:i]
        if i < 0 or not 0 < len(line) <= 8 or line.strip(_HEX):
            return None  # unfinished size line, chunk extension, ...: the general path
        size = int(line, 16)
        start = i + 2
        stop = start + size
        if size <= 0 or stop + 2 > end or data[stop:stop + 2] != b"\r\n":
            return None
        pieces.append(data[start:stop])
        pos = stop + 2
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
