"""The fan-out of one client request to several exchanges (a tune's candidates)."""

from __future__ import annotations

from proxy.mirror.candidates import FanOut, joined
from proxy.mirror.relay import ChunkTap, RelayResult


class Handle:
    def __init__(self) -> None:
        self.chunks: list[tuple[str, bytes, float]] = []
        self.done: list[RelayResult] = []

    def tap_for(self, content_type: str) -> ChunkTap:
        return lambda payload, t: self.chunks.append((content_type, payload, t))

    def primary_done(self, result: RelayResult) -> None:
        self.done.append(result)


def test_every_exchange_sees_every_chunk_and_the_end() -> None:
    a, b = Handle(), Handle()
    fan = joined(a, None, b)
    assert isinstance(fan, FanOut)
    tap = fan.tap_for("text/event-stream")
    tap(b"data: 1\n\n", 1.0)
    tap(b"data: 2\n\n", 2.0)
    result = RelayResult()
    fan.primary_done(result)
    for handle in (a, b):
        assert handle.chunks == [("text/event-stream", b"data: 1\n\n", 1.0),
                                 ("text/event-stream", b"data: 2\n\n", 2.0)]
        assert handle.done == [result]


def test_one_or_no_exchange_is_not_wrapped() -> None:
    a = Handle()
    assert joined(None, a) is a
    assert joined(None, None) is None
