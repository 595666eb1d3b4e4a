"""The batched CaptureBuilder reads the same Capture whichever JSON parser it has.

Streams are generated like vLLM's (chat and completions, token_ids deltas, logprobs,
usage chunk, n=2, long prompt_token_ids) with faults mixed in (error events, invalid or
non-object JSON, NaN, huge ints, lone surrogates, invalid UTF-8, missing [DONE], odd SSE
fields), cut at random points, and fed to the builder with orjson and with the stdlib
fallback. What the capture reads is checked against an independent oracle, vLLM's own
benchmark client, in test_capture_bench_oracle.py, and case by case in test_capture.py.
(A per-event copy of the builder once served as the reference here; it was edited along
with the builder, so it checked nothing and was removed.)
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from proxy.capture import builder
from proxy.capture.builder import BATCH_EVENTS, CaptureBuilder

PIECES = ("", "Hé", "llo", " 日本", "語 ", "🙂", "!", '"q"', "a\\b", "line\nbreak", " tok", "\t")
FAULTS = ("error_event", "error_object", "bad_json", "non_object", "nan", "huge_int",
          "surrogate", "bad_utf8", "no_done", "multiline", "fields", "bad_ids", "bad_content",
          "bad_delta", "choices_dict", "two_values", "empty_data", "leading_space")


def _choice(rng: random.Random, chat: bool, i: int, last: bool, index: int) -> dict[str, Any]:
    piece = rng.choice(PIECES)
    choice: dict[str, Any] = {"index": index}
    if chat:
        delta: dict[str, Any] = {"content": piece}
        roll = rng.random()
        if roll < 0.1:
            delta = {"reasoning_content": piece or "think"}
        elif roll < 0.15:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
        choice["delta"] = delta
    else:
        choice["text"] = piece
    if rng.random() < 0.7:
        choice["token_ids"] = [rng.randint(0, 150000) for _ in range(rng.choice((1, 1, 1, 2, 0)))]
    if rng.random() < 0.3:
        if chat:
            choice["logprobs"] = {"content": [{
                "token": piece, "logprob": -0.1 * i, "bytes": list(piece.encode()),
                "top_logprobs": [{"token": piece, "logprob": -0.1},
                                 {"token": f"alt{i}", "logprob": -2.5}]}]}
        else:
            choice["logprobs"] = {"tokens": [piece], "token_logprobs": [-0.2],
                                  "text_offset": [i], "top_logprobs": [{piece: -0.2, "zz": -3.0}]}
    else:
        choice["logprobs"] = None
    choice["finish_reason"] = rng.choice(("stop", "length")) if last else None
    return choice


def _events(rng: random.Random) -> list[bytes]:
    chat = rng.random() < 0.5
    head: dict[str, Any] = {"id": "x-1", "object": "chat.completion.chunk" if chat
                            else "text_completion", "created": 1, "model": "m"}
    objs: list[Any] = []
    if chat:
        first: dict[str, Any] = {**head, "choices": [{"index": 0, "delta": {
            "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
        if rng.random() < 0.2:
            first["prompt_token_ids"] = list(range(rng.choice((5, 2000))))
        objs.append(first)
    tokens = rng.choice((0, 1, 5, 30, BATCH_EVENTS - 1, BATCH_EVENTS + 3, 150))
    two = rng.random() < 0.1
    for i in range(tokens):
        choices = [_choice(rng, chat, i, i == tokens - 1, 0)]
        if two:
            choices.append(_choice(rng, chat, i, i == tokens - 1, 1))
            rng.shuffle(choices)
        objs.append({**head, "choices": choices})
    if rng.random() < 0.7:
        objs.append({**head, "choices": [], "usage": {"prompt_tokens": 3,
                                                      "completion_tokens": tokens}})
    ascii_only = rng.random() < 0.5
    out = [json.dumps(o, ensure_ascii=ascii_only).encode() for o in objs]
    faults = rng.sample(FAULTS, rng.choice((0, 0, 0, 1, 1, 2)))
    done = b"[DONE]"
    for fault in faults:
        at = rng.randint(0, len(out))
        if fault == "no_done":
            done = b""
            continue
        out.insert(at, {
            "error_event": json.dumps({"error": {"message": "boom", "code": 500}}).encode(),
            "error_object": b'{"object":"error","message":"x"}',
            "bad_json": b'{"choices": [{"text": "x"',
            "non_object": rng.choice((b"[1, 2]", b"5", b'"s"', b"null")),
            "nan": b'{"choices":[{"index":0,"text":"n","logprobs":{"tokens":["n"],'
                   b'"top_logprobs":[{"n":NaN}]}}]}',
            "huge_int": b'{"choices":[{"index":0,"text":"h","token_ids":[' +
                        str(2**70).encode() + b"]}]}",
            "surrogate": b'{"choices":[{"index":0,"text":"\\ud800x"}]}',
            "bad_utf8": b'{"choices":[{"index":0,"text":"\xff\xfe"}]}',
            "multiline": b'{"choices":\ndata: [{"index":0,"text":"m"}]}',
            "fields": b"",
            "bad_ids": b'{"choices":[{"index":0,"text":"i","token_ids":["a"]}]}',
            "bad_content": b'{"choices":[{"index":0,"delta":{"content":5}}]}',
            "bad_delta": b'{"choices":[{"index":0,"delta":[1]}]}',
            "choices_dict": b'{"choices":{"index":0}}',
            "two_values": b'{"a":1},{"b":2}',
            "empty_data": b"",
            "leading_space": b' {"choices":[{"index":0,"text":"s"}]}',
        }[fault])
    events = [b"data: " + o + b"\n\n" for o in out]
    if "fields" in faults:
        events.insert(rng.randint(0, len(events)), b": ping\nevent: x\nid: 7\nretry: 5\n\n")
    if done:
        events.append(b"data: " + done + b"\n\n")
    return events


def _chunks(rng: random.Random, events: list[bytes]) -> list[bytes]:
    newline = rng.choice((b"\n", b"\n", b"\n", b"\r\n", b"\r"))
    raw = [e.replace(b"\n", newline) for e in events]
    how = rng.random()
    if how < 0.4:
        return raw  # one event per chunk, as vLLM writes them
    joined = b"".join(raw)
    if how < 0.5:
        return [joined[i:i + 1] for i in range(len(joined))]
    cuts = sorted(rng.sample(range(1, max(2, len(joined))), min(len(joined) - 1,
                                                              rng.randint(1, 30))))
    return [joined[a:b] for a, b in zip([0, *cuts], [*cuts, len(joined)])]


def _capture(chunks: list[bytes], cancelled: bool) -> str:
    builder = CaptureBuilder("shadow", "new", 0.0, stream=True)
    for i, chunk in enumerate(chunks):
        builder.on_chunk(chunk, 0.001 * (i + 1))
    return repr(builder.finish(200, 1.0, cancelled=cancelled))  # repr: NaN equals itself


def test_orjson_and_the_stdlib_fallback_read_the_same_capture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if builder._fast_loads is None:
        pytest.fail("orjson is not installed: the [fast] extra is part of the dev install")
    rng = random.Random(20261202)
    faulty = 0
    for case in range(300):
        events = [e for e in _events(rng) if str(2**70).encode() not in e]  # see below
        chunks = _chunks(rng, events)
        cancelled = rng.random() < 0.05
        fast = _capture(chunks, cancelled)
        with monkeypatch.context() as patch:
            patch.setattr(builder, "_fast_loads", None)
            assert _capture(chunks, cancelled) == fast, f"case {case}: {chunks[:3]!r}"
        faulty += "error=None" not in fast
    assert 45 < faulty < 255  # both clean and broken streams were compared


def test_batches_are_parsed_while_streaming_not_only_at_the_end() -> None:
    builder = CaptureBuilder("primary", "old", 0.0)
    event = b'data: {"choices":[{"index":0,"text":"a","token_ids":[1]}]}\n\n'
    for i in range(BATCH_EVENTS):
        builder.on_chunk(event, 0.1 * (i + 1))
    assert builder.events == BATCH_EVENTS  # parsed: held bytes stay bounded
    builder.on_chunk(b'data: {"error": {"message": "x"}}\n\n', 9.0)
    assert builder.error is None  # held until the next batch or finish
    result = builder.finish(200, 10.0)
    assert result.error == "stream_error" and result.ttft_s == pytest.approx(0.1)
    assert result.token_ids == (1,) * BATCH_EVENTS


def test_decoder_error_after_an_unparsed_bad_event_keeps_the_first_error() -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(b'data: {"object":"error"}\n\n', 0.1)
    builder._decoder.max_line_bytes = 8  # type: ignore[union-attr]
    builder.on_chunk(b"data: " + b"x" * 64, 0.2)
    assert builder.error == "stream_error"


def test_with_orjson_only_integers_beyond_64_bits_read_differently(
        monkeypatch: pytest.MonkeyPatch) -> None:
    big = b'data: {"choices":[{"index":0,"text":"a","token_ids":[%d]}]}\n\n' % 2**70
    chunks = [big, big, b"data: [DONE]\n\n"]
    # orjson reads 2**70 as a float: not a token id; the stdlib fallback reads it as int.
    assert ("invalid_sse" in _capture(chunks, False)) == (builder._fast_loads is not None)
    monkeypatch.setattr(builder, "_fast_loads", None)
    assert "invalid_sse" not in _capture(chunks, False)
