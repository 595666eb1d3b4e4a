from __future__ import annotations

import json

import pytest

from proxy.capture.request import (
    MAX_DEPTH,
    UnreadableRequest,
    endpoint_for_path,
    is_deterministic,
    prepare,
    prompt_sha256,
    read_request,
    request_meta,
    shadow_body,
    unmirrorable,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "héllo"},
                                   {"role": "user", "content": [{"type": "text", "text": "abc"}]}],
        "temperature": 0, "max_tokens": 16, "stream": True, "logprobs": True, "top_logprobs": 3}


def test_chat_meta() -> None:
    meta = request_meta(json.dumps(CHAT).encode(), "chat")
    assert meta is not None
    assert (meta.endpoint, meta.stream, meta.deterministic) == ("chat", True, True)
    assert (meta.prompt_chars, meta.max_tokens, meta.n, meta.logprobs_k) == (8, 16, 1, 3)
    assert len(meta.prompt_sha256) == 64


def test_completion_meta_logprobs_and_token_prompt() -> None:
    meta = request_meta(b'{"prompt": [1, 2, 3], "logprobs": 5, "n": 2, "seed": 1}', "completions")
    assert meta is not None
    assert (meta.prompt_chars, meta.logprobs_k, meta.n, meta.deterministic, meta.stream) == (
        3, 5, 2, True, False)
    assert request_meta(b'{"prompt": "x"}', "completions").logprobs_k is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("req", "expected"), [
    ({}, False), ({"temperature": 1.0}, False), ({"temperature": 0.0}, True),
    ({"temperature": 0}, True), ({"temperature": 0.7, "seed": 3}, True), ({"seed": None}, False),
    ({"temperature": None}, False), ({"temperature": False}, False), ({"top_k": 1}, True),
])
def test_determinism_rule(req: dict[str, object], expected: bool) -> None:
    assert is_deterministic(req) is expected


def test_hash_ignores_volatile_keys_and_key_order() -> None:
    base = {"prompt": "x", "temperature": 0, "max_tokens": 4}
    noisy = {"max_tokens": 4, "stream": True, "stream_options": {"include_usage": True},
             "user": "u1", "return_token_ids": True, "temperature": 0, "prompt": "x"}
    assert prompt_sha256(base) == prompt_sha256(noisy)
    assert prompt_sha256(base) != prompt_sha256({**base, "prompt": "y"})


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\xff\xfe", b"", b'"str"'])
def test_malformed_bodies_are_not_mirrored(body: bytes) -> None:
    assert request_meta(body, "chat") is None
    assert shadow_body(body) is None
    assert prepare(body, "chat") is None


def test_shadow_body_adds_token_ids_and_keeps_everything_else() -> None:
    raw = json.dumps(CHAT, ensure_ascii=False).encode()
    out = shadow_body(raw)
    assert out is not None
    assert json.loads(out) == {**CHAT, "return_token_ids": True}
    already = json.dumps({**CHAT, "return_token_ids": True}).encode()
    assert shadow_body(already) == already


def test_prepare_parses_once_and_returns_both() -> None:
    prepared = prepare(b'{"prompt": "x", "temperature": 0}', "completions")
    assert prepared is not None
    assert prepared.meta.deterministic
    assert json.loads(prepared.shadow_body) == {"prompt": "x", "temperature": 0,
                                                "return_token_ids": True}


@pytest.mark.parametrize(("path", "endpoint"), [
    ("/v1/completions", "completions"), ("/v1/chat/completions", "chat"),
    ("/v1/chat/completions/", "chat"), ("/v1/models", None), ("/", None)])
def test_endpoint_for_path(path: str, endpoint: str | None) -> None:
    assert endpoint_for_path(path) == endpoint


@pytest.mark.parametrize(("req", "expected"), [
    ({"max_tokens": 7}, 7), ({"max_completion_tokens": 9, "max_tokens": 7}, 9),
    ({"max_completion_tokens": None, "max_tokens": 7}, 7), ({"max_tokens": "7"}, None), ({}, None)])
def test_max_tokens(req: dict[str, object], expected: int | None) -> None:
    meta = request_meta(req, "chat")
    assert meta is not None and meta.max_tokens == expected


def test_responses_api_is_mirrored_unless_it_needs_server_state() -> None:
    assert endpoint_for_path("/v1/responses") == "responses"
    body = json.dumps({"input": [{"role": "user", "content": "hi"}], "temperature": 0,
                       "max_output_tokens": 9, "store": True}).encode()
    assert unmirrorable(json.loads(body), "responses") is None  # store alone: mirrored
    prepared = prepare(body, "responses")
    assert prepared is not None and prepared.shadow_body == body  # no return_token_ids there
    assert (prepared.meta.endpoint, prepared.meta.max_tokens, prepared.meta.prompt_chars) == (
        "responses", 9, 2)
    for key, value, reason in (("previous_response_id", "resp_1", "responses_previous_response"),
                               ("background", True, "responses_background"),
                               ("conversation", "conv_1", "responses_conversation")):
        stateful = {"input": "x", key: value}
        assert unmirrorable(stateful, "responses") == reason
        assert unmirrorable(stateful, "chat") is None
    assert unmirrorable({"input": "x", "background": False}, "responses") is None


def test_escaped_keys_mean_what_they_mean_to_the_engine() -> None:
    for raw, reason in ((rb'{"input":"x","previous\u005fresponse_id":"resp_abc"}',
                         "responses_previous_response"),
                        (rb'{"input":"x","backgroun\u0064":true}', "responses_background")):
        assert unmirrorable(read_request(raw, 1 << 20), "responses") == reason, raw
    seeded = read_request(rb'{"prompt":"x","s\u0065ed":7}', 1 << 20)
    assert request_meta(seeded, "completions").deterministic  # type: ignore[union-attr]


def test_read_request_refuses_what_it_cannot_read_within_its_limits() -> None:
    deep = b'{"input":' + b"[" * 5000 + b"]" * 5000 + b"}"
    for body, why in ((deep, "nested more than"), (b'{"a": 1', "not JSON"),
                      (b"[1, 2]", "not an object"), (b'{"a": "' + b"x" * 100 + b'"}', "over")):
        with pytest.raises(UnreadableRequest, match=why):
            read_request(body, 64 if why == "over" else 1 << 20)
    # Brackets inside strings (escaped quotes too) are text, not nesting.
    text = b'{"prompt": "' + b'[{\\"' * 500 + b'"}'
    assert read_request(text, 1 << 20)["prompt"].startswith('[{"')
    inner = MAX_DEPTH - 1  # the object itself is one level
    assert read_request(b'{"a":' + b"[" * inner + b"]" * inner + b"}", 1 << 20)
    assert prepare(deep, "chat") is None
