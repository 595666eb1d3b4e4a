"""Property-based tests of the SSE decoder: any bytes, any splits (see tests/fuzzing.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.capture.sse import SSEDecoder, SSEEvent
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.fuzz

# Bytes weighted towards what the decoder branches on.
_PIECES = st.sampled_from([b"\n", b"\r", b"\r\n", b"\n\n", b"data: ", b"data:", b"data",
                           b"event: ", b"id: ", b"retry: 5", b":", b" ", b"x", b"[DONE]",
                           "é🙂".encode(), b"\xe2\x82", b"\xff", b"\0", b"{}"])
_STREAMS = st.lists(st.one_of(_PIECES, st.binary(max_size=12)), max_size=40).map(b"".join)


def _pieces(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(raw) + 1) for c in cuts), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


def _events(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out = [e for piece in pieces for e in decoder.feed(piece)]
    return out + decoder.flush()


def _data(pieces: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    out = [d for piece in pieces for d in decoder.feed_data(piece)]
    return out + decoder.flush_data()


@fuzz_settings(800)
@given(_STREAMS, st.lists(st.integers(min_value=0), max_size=8))
def test_any_split_gives_the_events_of_the_whole(raw: bytes, cuts: list[int]) -> None:
    whole = _events([raw])
    assert _events(_pieces(raw, cuts)) == whole
    assert _events([raw[i:i + 1] for i in range(len(raw))]) == whole
    raw_data = _data(_pieces(raw, cuts))
    assert raw_data == _data([raw])
    assert [d.decode("utf-8", "replace") for d in raw_data] == [e.data for e in whole]


_TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
                max_size=12)
_EVENT = st.tuples(st.lists(_TEXT, min_size=1, max_size=3),
                   st.sampled_from([None, "message", "delta"]), st.booleans())


@fuzz_settings(600)
@given(st.lists(_EVENT, max_size=6), st.sampled_from(["\n", "\r\n", "\r"]),
       st.lists(st.integers(min_value=0), max_size=6))
def test_written_events_come_back(events: list[tuple[list[str], str | None, bool]],
                                  newline: str, cuts: list[int]) -> None:
    """What a server writes (data lines, an event name, a comment) is what is read."""
    text = ""
    for lines, name, comment in events:
        text += f": keep-alive{newline}" if comment else ""
        text += f"event: {name}{newline}" if name else ""
        text += "".join(f"data: {line}{newline}" for line in lines) + newline
    raw = text.encode()
    expected = [SSEEvent("\n".join(lines), name or "message") for lines, name, _ in events]
    assert _events(_pieces(raw, cuts)) == expected


@fuzz_settings(100)
@given(st.binary(min_size=1, max_size=64).filter(lambda b: b"\n" not in b and b"\r" not in b),
       st.lists(st.integers(min_value=0), max_size=4))
def test_an_overlong_line_is_a_value_error_however_it_arrives(line: bytes,
                                                               cuts: list[int]) -> None:
    for feed in ("feed", "feed_data"):
        decoder = SSEDecoder(max_line_bytes=len(line) + 5)
        with pytest.raises(ValueError, match="SSE line longer than"):
            for piece in _pieces(b"data: " + line + b"\n\n", cuts):
                getattr(decoder, feed)(piece)
