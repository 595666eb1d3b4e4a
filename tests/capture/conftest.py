"""Realistic vLLM response streams shared by the comparison tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

CHAT_PIECES = ("Hé", "llo", " 日本", "語 ", "🙂", "!")


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def build_chat_stream(
    pieces: Sequence[str] = CHAT_PIECES,
    token_ids: Sequence[int] | None = None,
    *,
    finish_reason: str = "stop",
    usage: bool = True,
    logprobs: bool = False,
    newline: bytes = b"\n",
) -> bytes:
    """A chat stream as vLLM sends it: role chunk, one chunk per token, finish, usage, DONE."""
    ids = list(token_ids) if token_ids is not None else [100 + i for i in range(len(pieces))]
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [_sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "logprobs": None, "finish_reason": None}]})]
    for i, (piece, tid) in enumerate(zip(pieces, ids)):
        choice: dict[str, Any] = {"index": 0, "delta": {"content": piece}, "finish_reason": None,
                                  "token_ids": [tid]}
        if logprobs:
            choice["logprobs"] = {"content": [{
                "token": piece, "logprob": -0.1, "bytes": list(piece.encode()),
                "top_logprobs": [{"token": piece, "logprob": -0.1, "bytes": None},
                                 {"token": f"alt{i}", "logprob": -2.5, "bytes": None}]}]}
        out.append(_sse({**head, "choices": [choice]}))
    out.append(_sse({**head, "choices": [{"index": 0, "delta": {"content": ""},
                                          "finish_reason": finish_reason, "token_ids": []}]}))
    if usage:
        out.append(_sse({**head, "choices": [], "usage": {
            "prompt_tokens": 7, "completion_tokens": len(pieces), "total_tokens": 7 + len(pieces)}}))
    out.append(b"data: [DONE]\n\n")
    raw = b"".join(out)
    return raw if newline == b"\n" else raw.replace(b"\n", newline)


def build_completion_stream(pieces: Sequence[str], token_ids: Sequence[int]) -> bytes:
    head = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    out = []
    for i, (piece, tid) in enumerate(zip(pieces, token_ids)):
        last = i == len(pieces) - 1
        out.append(_sse({**head, "choices": [{
            "index": 0, "text": piece, "token_ids": [tid],
            "logprobs": {"tokens": [piece], "token_logprobs": [-0.2], "text_offset": [i],
                         "top_logprobs": [{piece: -0.2, "zz": -3.0}]},
            "finish_reason": "length" if last else None}]}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


@pytest.fixture
def chat_stream() -> Callable[..., bytes]:
    return build_chat_stream


@pytest.fixture
def completion_stream() -> Callable[..., bytes]:
    return build_completion_stream
