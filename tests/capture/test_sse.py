from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from proxy.capture.sse import DONE, SSEDecoder, SSEEvent


def decode_in_pieces(raw: bytes, cuts: list[int]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    prev = 0
    for cut in [*sorted(cuts), len(raw)]:
        events += decoder.feed(raw[prev:cut])
        prev = cut
    return events + decoder.flush()


def test_whole_chat_stream_yields_one_event_per_data_line(chat_stream: Callable[..., bytes]) -> None:
    events = decode_in_pieces(chat_stream(), [])
    assert len(events) == 1 + 6 + 1 + 1 + 1
    assert events[-1].data == DONE
    assert '"content": "🙂"' in events[5].data
    assert all(e.event == "message" for e in events)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_single_split_point_gives_the_same_events(
    chat_stream: Callable[..., bytes], newline: bytes
) -> None:
    raw = chat_stream(newline=newline)
    expected = decode_in_pieces(chat_stream(), [])
    for cut in range(len(raw) + 1):
        assert decode_in_pieces(raw, [cut]) == expected, f"split at byte {cut}"


def test_byte_by_byte_and_random_multi_splits(chat_stream: Callable[..., bytes]) -> None:
    raw = chat_stream(newline=b"\r\n")
    expected = decode_in_pieces(chat_stream(), [])
    assert decode_in_pieces(raw, list(range(len(raw)))) == expected
    rng = random.Random(1234)
    for _ in range(300):
        cuts = rng.sample(range(len(raw)), rng.randint(2, 40))
        assert decode_in_pieces(raw, cuts) == expected


def test_utf8_character_split_inside_its_bytes() -> None:
    raw = 'data: {"t":"日🙂"}\n\n'.encode()
    start = raw.index("日".encode())
    for cut in range(start, start + 7):
        assert decode_in_pieces(raw, [cut]) == [SSEEvent('{"t":"日🙂"}')]


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("b")]


def test_multiline_data_comments_fields_and_no_space_after_colon() -> None:
    raw = (
        b": keep-alive\n\n"
        b"event: update\nid: 7\ndata: line1\ndata:line2\ndata\nretry: 10\nbogus\n\n"
        b"data:  two spaces\n\n"
    )
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    assert events == [SSEEvent("line1\nline2\n", "update", "7"), SSEEvent(" two spaces", "message", "7")]
    assert decoder.comments == 1


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert SSEDecoder().feed(b"\n\n\r\n: ping\n\n") == []


def test_flush_dispatches_unterminated_event_and_pending_counts_bytes() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\ndata: y") == []
    assert decoder.pending_bytes == len(b"x") + len(b"data: y")
    assert decoder.flush() == [SSEEvent("x\ny")]
    assert decoder.flush() == []


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert SSEDecoder().feed(b"data: \xff\xfe\n\n") == [SSEEvent("\ufffd\ufffd")]


def test_overlong_line_raises_value_error() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    with pytest.raises(ValueError, match="longer than 16"):
        decoder.feed(b"data: " + b"x" * 20)


def test_feed_data_gives_the_data_of_feed_for_one_event_per_chunk_and_around_it() -> None:
    # The one-event-per-chunk shortcut must not take a chunk it does not fully understand.
    chunks = [b"data: a\n\n", b"data: \n\n", b"data:b\n\n", b"data: c\r\n\r\n", b"data: d\r\r",
              b"event: x\ndata: e\n\n", b"data: f\ndata: g\n\n", b"data: h\n", b"\n",
              b"data: i", b"\n\n", b"data: j\r", b"\ndata: k\n\n", b": ping\n\n",
              b"data: l\n\ndata: m\n\n", b"data: \xff\n\n", b"id: 3\n\ndata: n\n\n",
              b"data: o\rp\n\n", b"data: q\r\n\n"]
    rng = random.Random(7)
    for _ in range(300):
        stream = [rng.choice(chunks) for _ in range(rng.randint(1, 12))]
        by_event, by_data = SSEDecoder(), SSEDecoder()
        events = [e.data for c in stream for e in by_event.feed(c)] + \
            [e.data for e in by_event.flush()]
        datas = [d for c in stream for d in by_data.feed_data(c)] + by_data.flush_data()
        assert [d.decode("utf-8", "replace") for d in datas] == events, stream
