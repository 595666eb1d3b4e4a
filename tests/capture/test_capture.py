from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from proxy.capture.builder import CaptureBuilder
from proxy.capture.types import Capture


def feed_events(raw: bytes, t0: float = 10.0, step: float = 0.01) -> tuple[Capture, list[float]]:
    """Feed each SSE event as its own chunk, event i at t0 + (i+1)*step."""
    builder = CaptureBuilder("shadow", "new", t0)
    parts = [p + b"\n\n" for p in raw.split(b"\n\n") if p]
    stamps = [t0 + (i + 1) * step for i in range(len(parts))]
    for part, t in zip(parts, stamps):
        builder.on_chunk(part, t)
    return builder.finish(200, stamps[-1] + step), stamps


def test_chat_stream_timing_counts_chunks_with_choices_not_the_usage_chunk(
    chat_stream: Callable[..., bytes],
) -> None:
    cap, stamps = feed_events(chat_stream())
    # events: role, 6 content, finish, usage, DONE. As vllm bench serve times them: TTFT
    # at the first chunk with choices (the role chunk), one gap per later one (6 content
    # chunks and the finish chunk); the usage chunk has `choices: []`.
    assert cap.ttft_s == pytest.approx(stamps[0] - 10.0)
    assert len(cap.itl_s) == 7
    assert all(gap == pytest.approx(0.01) for gap in cap.itl_s)
    assert cap.e2e_s == pytest.approx(stamps[-1] + 0.01 - 10.0)
    assert cap.text == "Héllo 日本語 🙂!"
    assert cap.token_ids == (100, 101, 102, 103, 104, 105)
    assert cap.token_char_ends == (2, 5, 8, 10, 11, 12)
    assert cap.output_tokens == 6
    assert cap.finish_reason == "stop"
    assert cap.error is None and cap.status == 200 and cap.role == "shadow"
    assert cap.top_logprobs is None


def test_a_completion_chunk_with_empty_text_is_the_first_token() -> None:
    # vLLM holds back text the detokenizer cannot show yet (part of a UTF-8 character,
    # a special token) and sends the chunk anyway; vllm bench serve times it as the TTFT.
    events = (b'data: {"choices":[{"index":0,"text":"","finish_reason":null}]}\n\n'
              b'data: {"choices":[{"index":0,"text":"\xc3\xa9","finish_reason":null}]}\n\n'
              b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n')
    cap, stamps = feed_events(events)
    assert cap.ttft_s == pytest.approx(stamps[0] - 10.0)
    assert cap.itl_s == pytest.approx((0.01,))
    assert cap.text == "é" and cap.output_tokens == 2


def test_output_tokens_fall_back_to_token_ids(chat_stream: Callable[..., bytes]) -> None:
    cap, _ = feed_events(chat_stream(["a", "b"], [5, 6], usage=False, finish_reason="length"))
    assert cap.output_tokens == 2 and cap.finish_reason == "length"


def test_capture_is_the_same_at_every_split_point(chat_stream: Callable[..., bytes]) -> None:
    raw = chat_stream(newline=b"\r\n", logprobs=True)
    whole = CaptureBuilder("primary", "old", 0.0)
    whole.on_chunk(raw, 1.0)
    expected = whole.finish(200, 2.0)
    assert expected.text == "Héllo 日本語 🙂!"
    for cut in range(len(raw) + 1):
        builder = CaptureBuilder("primary", "old", 0.0)
        builder.on_chunk(raw[:cut], 1.0)
        builder.on_chunk(raw[cut:], 1.0)
        got = builder.finish(200, 2.0)
        assert (got.text, got.token_ids, got.top_logprobs, got.ttft_s) == (
            expected.text, expected.token_ids, expected.top_logprobs, expected.ttft_s
        ), cut


def test_chat_logprobs_flatten_per_position(chat_stream: Callable[..., bytes]) -> None:
    cap, _ = feed_events(chat_stream(["x", "y"], [1, 2], logprobs=True))
    assert cap.sampled_tokens == ("x", "y")
    assert cap.top_logprobs == ({"x": -0.1, "alt0": -2.5}, {"y": -0.1, "alt1": -2.5})


def test_completion_stream_text_ids_and_logprobs(completion_stream: Callable[..., bytes]) -> None:
    cap, stamps = feed_events(completion_stream(["A", "B", "C"], [7, 8, 9]))
    assert (cap.text, cap.token_ids, cap.finish_reason) == ("ABC", (7, 8, 9), "length")
    assert cap.ttft_s == pytest.approx(stamps[0] - 10.0)
    assert len(cap.itl_s) == 2
    assert cap.sampled_tokens == ("A", "B", "C")
    assert cap.top_logprobs is not None and cap.top_logprobs[2] == {"C": -0.2, "zz": -3.0}


def test_mid_stream_error_event_ends_capture_with_error(chat_stream: Callable[..., bytes]) -> None:
    raw = chat_stream(["a", "b"], [1, 2], usage=False)
    cut = raw.index(b'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, '
                    b'"model": "m", "choices": [{"index": 0, "delta": {"content": "b"')
    err = b'data: {"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}\n\n'
    cap, _ = feed_events(raw[:cut] + err + raw[cut:])
    assert cap.error == "stream_error"
    assert cap.text == "a" and cap.token_ids == (1,)


@pytest.mark.parametrize("payload", [b"data: {not json\n\n", b"data: [1, 2]\n\n", b"data: {} x\n\n",
                                     b"data: \n\n", b'data: {"a": 1\n\n',
                                     b'data: {"choices": 5}\n\n', b'data: {"choices": [3]}\n\n',
                                     b"data: " + b"[" * 100_000 + b"\n\n",
                                     b'data: {"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n\n"])
def test_invalid_sse_or_json_becomes_error_without_raising(payload: bytes) -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "ok"}]}\n\n', 0.5)
    builder.on_chunk(payload, 0.6)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "late"}]}\n\n', 0.7)
    cap = builder.finish(200, 1.0)
    assert cap.error == "invalid_sse"
    assert cap.text == "ok"


def test_a_deeply_nested_body_is_invalid_json_not_a_recursion_error() -> None:
    builder = CaptureBuilder("shadow", "new", 0.0, stream=False)
    builder.on_body(b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 0.5)
    assert builder.finish(200, 1.0).error == "invalid_json"


def test_unterminated_final_event_is_still_parsed() -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "z", "finish_reason": "stop"}]}', 0.5)
    cap = builder.finish(200, 1.0)
    assert (cap.text, cap.finish_reason, cap.ttft_s) == ("z", "stop", 0.5)


def test_only_choice_zero_is_kept_but_any_choice_counts_for_ttft() -> None:
    builder = CaptureBuilder("primary", "old", 0.0)
    builder.on_chunk(b'data: {"choices": [{"index": 1, "text": "other"}]}\n\n', 0.2)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "mine"}]}\n\n', 0.3)
    cap = builder.finish(200, 0.4)
    assert cap.text == "mine" and cap.ttft_s == pytest.approx(0.2)


def test_non_stream_chat_body() -> None:
    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi 👋"},
                                    "finish_reason": "stop", "token_ids": [4, 5, 6],
                                    "logprobs": {"content": [{"token": "hi", "logprob": -0.5,
                                                              "top_logprobs": []}]}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 3}}).encode()
    builder = CaptureBuilder("primary", "old", 1.0)
    builder.on_body(body[:10], 1.2)
    builder.on_body(body[10:], 1.3)
    cap = builder.finish(200, 1.5)
    # Timed to the last byte's arrival (1.3), not to when the caller finished (1.5).
    assert cap.ttft_s == pytest.approx(0.3) and cap.e2e_s == pytest.approx(0.3)
    assert (cap.text, cap.token_ids, cap.output_tokens) == ("hi 👋", (4, 5, 6), 3)
    assert cap.sampled_tokens == ("hi",) and cap.top_logprobs == ({},)
    assert cap.token_char_ends is None  # one body: no per-token arrival offsets
    assert cap.itl_s == ()


def test_non_stream_completion_body_without_usage() -> None:
    body = b'{"choices": [{"index": 0, "text": "abc", "finish_reason": "length", "token_ids": [1,2]}]}'
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_body(body, 0.1)
    cap = builder.finish(200, 0.2)
    assert (cap.text, cap.output_tokens, cap.finish_reason) == ("abc", 2, "length")


def test_http_errors_transport_errors_and_cancel() -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_body(b'{"error": {"message": "bad"}}', 0.1)
    assert builder.finish(503, 0.2).error == "http_5xx"
    builder = CaptureBuilder("shadow", "new", 0.0)
    assert builder.finish(400, 0.2).error == "http_4xx"
    cap = CaptureBuilder("shadow", "new", 0.0).finish(None, 3.0, error="timeout")
    assert (cap.error, cap.status, cap.e2e_s, cap.ttft_s) == ("timeout", None, None, None)
    builder = CaptureBuilder("primary", "old", 0.0)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n', 0.1)
    cap = builder.finish(200, 0.2, cancelled=True)
    assert cap.cancelled and cap.text == "a" and cap.error is None
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_body(b"<html>oops", 0.1)
    assert builder.finish(200, 0.2).error == "invalid_json"


def test_json_with_surrounding_whitespace_is_accepted() -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(b'data:   {"choices": [{"index": 0, "text": "a"}]}  \n\n', 0.5)
    builder.on_chunk(b'data: {"choices": [{"index": 0, "text": "b"}]}\t\n\ndata: [DONE]\n\n', 0.6)
    cap = builder.finish(200, 1.0)
    assert cap.error is None and cap.text == "ab"


def test_long_prompt_token_ids_are_cut_before_parsing_and_in_small_chunks() -> None:
    prompt_ids = ",".join(str(100000 + i) for i in range(50000))
    first = ('data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],'
             f'"prompt_token_ids":[{prompt_ids}]}}\n\n').encode()
    rest = (b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"token_ids":[9]}]}\n\n'
            b"data: [DONE]\n\n")
    builder = CaptureBuilder("shadow", "new", 0.0)
    raw = first + rest
    for cut in range(0, len(raw), 1000):
        builder.on_chunk(raw[cut:cut + 1000], 0.5)
    cap = builder.finish(200, 1.0)
    assert cap.error is None and cap.text == "ok" and cap.token_ids == (9,)
    body = ('{"choices":[{"index":0,"text":"x","token_ids":[1],"prompt_token_ids":'
            f'[{prompt_ids}]}}]}}').encode()
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_body(body, 0.5)
    assert builder.finish(200, 1.0).token_ids == (1,)


def test_long_events_skip_parsing_prompt_token_ids() -> None:
    # Proof the echoed prompt ids are cut rather than parsed: garbage in them goes unnoticed.
    filler = ",".join(["7"] * 3000)
    event = ('data: {"choices":[{"index":0,"text":"a","token_ids":[5]}],'
             f'"prompt_token_ids":[{filler},not-json]}}\n\ndata: [DONE]\n\n').encode()
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(event, 0.5)
    cap = builder.finish(200, 1.0)
    assert cap.error is None and cap.token_ids == (5,)


@pytest.mark.parametrize(("body", "stream", "error"), [
    (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n', False, "truncated"),
    (b"<html>not sse</html>\n\n", False, "invalid_sse"),
    (b"", True, "invalid_sse"),
    (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\ndata: [DONE]\n\n', False, None),
])
def test_stream_without_done_is_truncated_or_invalid(body: bytes, stream: bool,
                                                     error: str | None) -> None:
    builder = CaptureBuilder("shadow", "new", 0.0, stream=stream)
    if body:
        builder.on_chunk(body, 0.5)
    assert builder.finish(200, 1.0).error == error
    cancelled = CaptureBuilder("shadow", "new", 0.0, stream=True).finish(200, 1.0, cancelled=True)
    assert cancelled.error is None


def _random_json(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([0, 1, -5, 2**40])
    if kind == 2:
        return rng.choice(["", "x", "é", "stop"])
    if kind == 3:
        return rng.random() < 0.5
    if kind == 4:
        return 1.5
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = ["choices", "usage", "delta", "text", "content", "token_ids", "logprobs", "index",
            "finish_reason", "message", "top_logprobs", "tokens", "token", "logprob", "error",
            "completion_tokens"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_random_shaped_json_never_raises_and_diff_accepts_the_result() -> None:
    from proxy.capture.types import RequestMeta
    from proxy.compare.diff import compare

    meta = RequestMeta("chat", True, True, "0" * 64, 1, 4)
    rng = random.Random(99)
    reference = CaptureBuilder("primary", "old", 0.0).finish(200, 1.0)
    for _ in range(400):
        events = [{"choices": [_random_json(rng) for _ in range(rng.randrange(3))]}
                  if rng.random() < 0.6 else _random_json(rng) for _ in range(rng.randrange(1, 5))]
        raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        stream = CaptureBuilder("shadow", "new", 0.0)
        stream.on_chunk(raw, 0.5)
        body = CaptureBuilder("shadow", "new", 0.0)
        body.on_body(json.dumps(events[0]).encode(), 0.5)
        for cap in (stream.finish(200, 1.0), body.finish(200, 1.0)):
            assert isinstance(cap.text, str)
            compare(reference, cap, meta, "shadow")
            compare(cap, cap, meta, "shadow")
