"""The load generator's response parser: TTFT on the first event with choices, event counts."""

from __future__ import annotations

import asyncio
import json
import random

from _sse_client import SSEStream


def _response(chunked: bool) -> tuple[bytes, int]:
    events = [b'data: {"id":"x","choices":[],"usage":null}\n\n']  # a choice-less first chunk
    events += [
        b"data: " + json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}).encode() + b"\n\n"
        for i in range(5)
    ]
    events.append(b"data: [DONE]\n\n")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if chunked:
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + body, 5
    body = b"".join(events)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body, 5


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


async def _parse(raw: bytes, cuts: list[int]) -> SSEStream:
    counter = [0, 0]
    stream = SSEStream(b"GET / HTTP/1.1\r\n\r\n", counter)
    stream.connection_made(_Transport())  # type: ignore[arg-type]
    done = stream.send()
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    for piece in pieces:
        stream.data_received(piece)
    await asyncio.wait_for(done, 1)
    assert counter[0] == stream.events
    assert counter[1] == 0  # no stream left counted as streaming
    return stream


async def test_events_and_ttft_survive_any_split() -> None:
    rng = random.Random(7)
    for chunked in (True, False):
        raw, expected = _response(chunked)
        for _ in range(200):
            cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(0, 12)))
            stream = await _parse(raw, cuts)
            assert stream.status == 200
            assert stream.events == expected, (chunked, cuts)
            assert stream.t_first >= stream.t_start > 0


async def test_choiceless_stream_has_no_ttft() -> None:
    body = b'data: {"choices":[]}\n\ndata: [DONE]\n\n'
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    stream = await _parse(raw, [])
    assert stream.t_first == 0.0 and stream.events == 0
