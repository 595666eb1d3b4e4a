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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

BodyKind = Literal["none", "length", "chunked", "close"]
Fields = tuple[tuple[str, str], ...]

MAX_HEAD_BYTES = 64 * 1024
MAX_SIZE_LINE_BYTES = 1024
_SIZE, _DATA, _CRLF, _TRAILER = range(4)

# The grammar h11 checks (RFC 9112 sections 4, 5 and 7.1), as compiled patterns.
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
# Field lines, each "token:value CRLF"; a value has no NUL and no whitespace but SP and HT.
_FIELD_LINES = re.compile(rb"(?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[^\x00\n\r\x0b\x0c]*\r\n)*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*")
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


def parse_fields(block: bytes) -> Fields:
    """Header (or trailer) lines, CRLF-separated -> (name, value) pairs; obsolete line
    folding is joined."""
    if not block:
        return ()
    # One pass of the grammar over every line at once, then plain splits.
    if _FIELD_LINES.fullmatch(block + b"\r\n") is None:
        unfolded = _unfold(block)
        if unfolded == block or _FIELD_LINES.fullmatch(unfolded + b"\r\n") is None:
            bad = next((line for line in unfolded.split(b"\r\n")
                        if _FIELD_LINES.fullmatch(line + b"\r\n") is None), block)
            raise FramingError(f"a malformed header line {bad[:80]!r}")
        block = unfolded
    return tuple([(name, value.strip(" \t")) for name, _, value in
                  [line.partition(":") for line in block.decode("latin-1").split("\r\n")]])


def _unfold(block: bytes) -> bytes:
    """Obsolete line folding joined with one space, as h11 does."""
    joined: list[bytes] = []
    for line in block.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not joined:
                raise FramingError("a continuation line before any header")
            joined[-1] += b" " + line.lstrip(_OWS)
        else:
            joined.append(line)
    return b"\r\n".join(joined)


def _tokens(value: str) -> list[str]:
    """The comma-separated tokens of a list-valued field, lower case."""
    return [token.strip().lower() for token in value.split(",") if token.strip()]


def parse_head(raw: bytes) -> Head:
    """The head of an answer (without its blank line); FramingError on anything malformed."""
    status_line, _, rest = raw.partition(b"\r\n")
    match = _STATUS_LINE.fullmatch(status_line)
    if match is None or int(match[2]) < 100:
        raise FramingError(f"a malformed status line {status_line[:80]!r}")
    fields = parse_fields(rest)
    content_type, codings, transfer = "", [], []
    for name, value in fields:
        lower = name.lower()
        if lower == "content-type":
            content_type = content_type or value.split(";", 1)[0].strip().lower()
        elif lower == "content-encoding":
            codings += [c for c in _tokens(value) if c != "identity"]
        elif lower == "transfer-encoding":
            transfer += _tokens(value)
    return Head(int(match[2]), (match[3] or b"").decode("latin-1"), fields, content_type,
                bool(transfer) and transfer[-1] == "chunked", f"1.{match[1].decode()}",
                ", ".join(codings))


def body_framing(method: str, status: int, version: str, headers: Sequence[tuple[str, str]]
                 ) -> Framing:
    """The body framing of an answer to `method` (RFC 9112 section 6.3), and keep-alive."""
    keep_alive = version != "1.0"
    transfer: list[str] = []
    lengths: set[str] = set()
    for name, value in headers:
        lower = name.lower()
        if lower == "connection":
            keep_alive = keep_alive and "close" not in _tokens(value)
        elif lower == "transfer-encoding":
            transfer += _tokens(value)
        elif lower == "content-length":
            lengths.update(part.strip() for part in value.split(","))
    if len(lengths) > 1 or any(not (v.isascii() and v.isdigit() and len(v) <= 20)
                               for v in lengths):
        raise FramingError(f"an invalid Content-Length {sorted(lengths)!r}")
    if method == "HEAD" or status < 200 or status in (204, 304):
        return Framing("none", 0, keep_alive)
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
    if 0 < len(line) <= 16 and not line.strip(_HEX):
        return int(line, 16)  # the usual line: hex digits alone
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
        """The payload in `data`, the next bytes of the body (not called once complete)."""
        kind = self.kind
        if kind == "chunked":
            out: list[bytes] = []
            pos = 0
            if self._buf:
                data, self._buf = self._buf + data, b""
            elif self._state == _SIZE:
                # The usual read: whole chunks, a slice each; the general path takes over
                # where they stop (a split chunk, an extension, the last chunk).
                pos = _whole_chunks(data, out)
                if pos == len(data):
                    return out[0] if len(out) == 1 else b"".join(out)
            self._dechunk(data, pos, out)
            return out[0] if len(out) == 1 else b"".join(out)
        if kind == "close":
            return data
        if len(data) >= self._left:  # "length", or "none" (0 left)
            self.overrun = len(data) > self._left
            data, self._left, self.complete = data[:self._left], 0, True
        else:
            self._left -= len(data)
        return data

    def _dechunk(self, data: bytes, pos: int, out: list[bytes]) -> None:
        """De-chunk `data` from `pos`, wherever the last read stopped, in one pass over it."""
        end = len(data)
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
            elif state == _SIZE:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if end - pos > MAX_SIZE_LINE_BYTES:
                        raise FramingError("a chunk size line too long")
                    self._buf = data[pos:]
                    break
                line, pos = data[pos:i], i + 2
                left = int(line, 16) if 0 < len(line) <= 16 and not line.strip(_HEX) \
                    else chunk_size(line)
                state = _DATA if left else _TRAILER
            else:  # trailer lines, then the blank line that ends the body
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if end - pos > MAX_HEAD_BYTES:
                        raise FramingError("a trailer line too long")
                    self._buf = data[pos:]
                    break
                line, pos = data[pos:i], i + 2
                if line:
                    self._trailer_lines.append(line)
                    if sum(map(len, self._trailer_lines)) > MAX_HEAD_BYTES:
                        raise FramingError("trailers longer than a head may be")
                else:
                    self.trailers = parse_fields(b"\r\n".join(self._trailer_lines))
                    self.complete = True
                    self.overrun = pos < end
                    break
        self._state, self._left = state, left


def _whole_chunks(data: bytes, out: list[bytes]) -> int:
    """Slice the whole non-final chunks with bare sizes at the start of `data` into `out`;
    the position where they stop."""
    pos, end = 0, len(data)
    while pos < end:
        i = data.find(b"\r\n", pos)
        line = data[pos:i]
        if i < 0 or not 0 < len(line) <= 8 or line.strip(_HEX):
            return pos  # unfinished size line, chunk extension, ...: the general path
        start = i + 2
        stop = start + int(line, 16)
        if stop == start or stop + 2 > end or data[stop:stop + 2] != b"\r\n":
            return pos
        out.append(data[start:stop])
        pos = stop + 2
    return pos
