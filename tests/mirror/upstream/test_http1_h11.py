"""The upstream client against h11 on the same generated answers (see tests/fuzzing.py).

Each example is one answer on the wire (interim 1xx heads, a status, a framing: length,
chunked with any sizes, extensions and trailers, close-delimited or none; HEAD, 204,
304; well-formed or broken in one place), split into reads anywhere, with or without the
server closing after it. `Http1Connection` and h11's client must agree on the body bytes,
the keep-alive decision and whether it is an error (or still incomplete).

Two answers are read differently on purpose, and the test says how (RFC 9112 section 6.3):
a Transfer-Encoding whose last coding is not chunked is read to the close (h11 refuses
any coding but `chunked`), and Transfer-Encoding beside Content-Length never leaves the
connection for reuse (h11 reuses it).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import h11
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from proxy.mirror.upstream.http1 import Http1Connection, UpstreamError
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.fuzz

MALFORMED = {  # what is broken -> how it is broken (applied in `_answers`)
    "status_4_digits", "status_2_digits", "status_no_space", "status_below_100",
    "size_0x", "size_plus_underscore", "size_leading_space", "size_empty", "size_not_hex",
    "chunk_no_crlf", "length_plus", "length_conflict", "header_no_colon",
    "header_space_in_name", "fold_first", "trailer_no_colon", "truncated",
}


@dataclass(frozen=True)
class Answer:
    method: str
    wire: bytes
    eof: bool  # the server closes after `wire`
    divergence: str | None  # "te_not_chunked" or "te_and_length": read per the RFC, not h11
    no_body: bool  # HEAD, 204 or 304
    persistent: bool  # HTTP/1.1 without Connection: close


@dataclass(frozen=True)
class Outcome:
    state: str  # "done", "error" or "pending" (no end seen yet)
    body: bytes = b""
    keep_alive: bool = False


def _size_line(size: int, draw: st.DrawFn) -> bytes:
    digits = draw(st.sampled_from(["%x", "%X", "%04x"])) % size
    ext = draw(st.sampled_from([b"", b"", b";a=b", b";x", b';q="v w"']))
    return digits.encode() + ext + draw(st.sampled_from([b"", b"", b" ", b"\t"]))


def _chunked(body: bytes, sizes: list[int], trailers: list[bytes], draw: st.DrawFn) -> bytes:
    out, pos = [], 0
    for size in sizes:
        piece = body[pos:pos + size]
        if not piece:
            break
        out.append(_size_line(len(piece), draw) + b"\r\n" + piece + b"\r\n")
        pos += len(piece)
    if pos < len(body):
        out.append(_size_line(len(body) - pos, draw) + b"\r\n" + body[pos:] + b"\r\n")
    return b"".join(out) + b"0\r\n" + b"".join(t + b"\r\n" for t in trailers) + b"\r\n"


@st.composite
def _answers(draw: st.DrawFn) -> Answer:
    method = draw(st.sampled_from(["GET", "POST", "HEAD"]))
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.1", b"1.0"]))
    status = draw(st.sampled_from([200, 200, 201, 204, 304, 400, 404, 500, 503]))
    framing = draw(st.sampled_from(["length"] * 3 + ["chunked"] * 4 + ["close"] * 2
                                   + ["te_not_chunked", "te_and_length"]))
    broken = draw(st.sampled_from([None] * 12 + sorted(MALFORMED)))
    if framing.startswith("te_"):
        broken = None  # one thing at a time: these are read differently already
    body = draw(st.binary(max_size=200) | st.sampled_from([b"data: {}\n\n" * 9, b"0\r\n\r\n"]))
    no_body = method == "HEAD" or status in (204, 304)
    event(f"framing={framing} no_body={no_body} broken={broken}")

    status_line = b"HTTP/%s %d %s" % (version, status, draw(st.sampled_from([b"OK", b"", b"A b"])))
    if draw(st.booleans()) and status_line.endswith(b" "):
        status_line = status_line[:-1]  # no reason phrase at all (h11 and we accept it)
    status_line = {
        "status_4_digits": b"HTTP/1.1 2000 OK", "status_2_digits": b"HTTP/1.1 20 OK",
        "status_no_space": b"HTTP/1.1 200OK", "status_below_100": b"HTTP/1.1 099 Low",
    }.get(broken or "", status_line)
    headers = [b"Content-Type: text/event-stream", b"X-Folded: a"]
    headers.append(b"  b" if draw(st.booleans()) else b"X-Plain: 1")
    connection = draw(st.sampled_from([None, b"close", b"keep-alive", b"Keep-Alive, X-Foo",
                                       b"closed"]))
    if connection is not None:
        headers.append(b"Connection: " + connection)
    divergence = None
    trailers = draw(st.lists(st.sampled_from([b"X-Sum: 1", b"X-T: a b"]), max_size=2))
    sizes = draw(st.lists(st.integers(1, 80), max_size=6))
    if framing == "length":
        length = b"%d" % len(body)
        headers.append(b"Content-Length: " + (length + b", " + length
                                              if draw(st.booleans()) else length))
        payload = body
    elif framing in ("chunked", "te_and_length"):
        headers.append(b"Transfer-Encoding: chunked")
        if framing == "te_and_length":
            headers.append(b"Content-Length: %d" % len(body))
            divergence = "te_and_length"
        payload = _chunked(body, sizes, trailers, draw)
    elif framing == "te_not_chunked":
        headers.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"gzip",
                                                                     b"chunked, gzip"])))
        payload, divergence = body, "te_not_chunked"
    else:
        payload = body
    if broken == "length_plus":
        headers.append(b"Content-Length: +%d" % len(body))
    elif broken == "length_conflict":
        headers += [b"Content-Length: 1", b"Content-Length: 2"]
    elif broken == "header_no_colon":
        headers.append(b"X-Broken no colon")
    elif broken == "header_space_in_name":
        headers.append(b"X Broken: 1")
    elif broken == "fold_first":
        headers.insert(0, b" folded-first")
    if "chunked" in framing or framing == "te_and_length":
        first = b"%x" % len(body[:sizes[0]] if sizes and body else body) if body else b"0"
        bad = {"size_0x": b"0x" + first, "size_plus_underscore": b"+0_" + first,
               "size_leading_space": b" " + first, "size_empty": b"", "size_not_hex": b"g"}
        if broken in bad:
            payload = bad[broken] + payload[payload.index(b"\r\n"):]
        elif broken == "chunk_no_crlf" and body:
            start = payload.index(b"\r\n") + 2 + int(payload[:payload.index(b"\r\n")]
                                                     .split(b";")[0].strip(), 16)
            payload = payload[:start] + b"XY" + payload[start + 2:]
        elif broken == "trailer_no_colon":
            payload = payload[:-2] + b"bad trailer\r\n\r\n"
    interim = draw(st.lists(st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n",
                                             b"HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n"]),
                            max_size=2))
    wire = b"".join(interim) + status_line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n"
    wire += b"" if no_body else payload
    eof = framing in ("close", "te_not_chunked") or draw(st.booleans())
    if broken == "truncated":
        wire, eof = wire[:draw(st.integers(0, max(0, len(wire) - 1)))], True
    return Answer(method, wire, eof, divergence, no_body,
                  version == b"1.1" and connection != b"close")


def _pieces(wire: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(wire) + 1) for c in cuts), len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(bounds) if b > a]  # b"" is h11's EOF


def _h11(answer: Answer, pieces: list[bytes]) -> Outcome:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    conn.send(h11.Request(method=answer.method, target="/", headers=[("Host", "b")]))
    conn.send(h11.EndOfMessage())
    body = b""
    try:
        for piece in [*pieces, *([b""] if answer.eof else [])]:
            conn.receive_data(piece)
            while (ev := conn.next_event()) is not h11.NEED_DATA:
                if isinstance(ev, h11.Data):
                    body += ev.data
                elif isinstance(ev, h11.EndOfMessage):  # ended by the close: not reusable
                    return Outcome("done", body, conn.their_state is h11.DONE and piece != b"")
                elif isinstance(ev, h11.ConnectionClosed):
                    return Outcome("error")
    except h11.RemoteProtocolError:
        return Outcome("error")
    return Outcome("pending")


class _Transport:
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


async def _ours(answer: Answer, pieces: list[bytes]) -> Outcome:
    conn = Http1Connection()
    conn.transport = _Transport()  # type: ignore[assignment]
    got: list[bytes] = []
    head = conn.send(b"request", answer.method)
    done: asyncio.Future[None] | None = None
    ended_by_close = False
    for piece in [*pieces, None] if answer.eof else pieces:
        if piece is None:
            ended_by_close = done is None or not done.done()
            conn.connection_lost(None)
        else:
            conn.data_received(piece)
        if done is None and head.done() and head.exception() is None:
            done = conn.attach(lambda data, t: got.append(data))
    await asyncio.sleep(0)
    future = done if done is not None else head
    if not future.done():
        return Outcome("pending")
    error = future.exception()
    if error is not None:
        assert isinstance(error, UpstreamError) and error.kind in ("bad_response", "reset")
        return Outcome("error")
    return Outcome("done", b"".join(got), conn.keep_alive and not ended_by_close)


def _expected(answer: Answer, reference: Outcome, wire_body: bytes) -> Outcome:
    """h11's outcome, or what RFC 9112 says where this client reads differently on purpose."""
    if answer.divergence == "te_and_length" and reference.state == "done" and not answer.no_body:
        return Outcome("done", reference.body, False)
    if answer.divergence == "te_not_chunked":
        if answer.no_body:
            return Outcome("done", b"", answer.persistent)
        return Outcome("done", wire_body, False)
    return reference


def _body_on_wire(wire: bytes) -> bytes:
    """The bytes after the last head (a close-delimited body as sent)."""
    rest = wire
    while b"\r\n\r\n" in rest and rest.startswith(b"HTTP/"):
        head, _, rest = rest.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 1"):
            break
    return rest


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@fuzz_settings(1500)
@given(answer=_answers(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_same_body_keep_alive_and_errors_as_h11(loop, answer, cuts):
    pieces = _pieces(answer.wire, cuts)
    ours = loop.run_until_complete(_ours(answer, pieces))
    reference = _h11(answer, pieces)
    event(f"outcome={reference.state} divergence={answer.divergence}")
    assert ours == _expected(answer, reference, _body_on_wire(answer.wire))
