"""What a request and an answer are to every later stage (CONTRACT): the request's
meaning (`RequestMeta`, never the prompt text) and one backend's answer to it (`Capture`),
frozen values the mirror builds while relaying.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxy.capture.answer import Answer

Role = Literal["primary", "shadow", "baseline"]
Endpoint = Literal["completions", "chat", "responses"]


@dataclass(frozen=True)
class RequestMeta:
    """What the proxy learned from a generation request body (never the prompt text)."""

    endpoint: Endpoint
    stream: bool
    deterministic: bool  # temperature == 0 or a seed was given
    prompt_sha256: str  # hash of the canonical request body minus volatile keys
    prompt_chars: int
    max_tokens: int | None
    n: int = 1
    logprobs_k: int | None = None  # top-k the request asked for, if any


@dataclass(frozen=True)
class Capture:
    """One backend's answer to one request, with timing as `vllm bench serve` measures it."""

    role: Role
    backend: str  # backend label (name or URL), bounded set
    status: int | None  # HTTP status; None when no response arrived
    ttft_s: float | None  # first chunk with choices (usage chunk excluded); non-stream: e2e
    itl_s: tuple[float, ...]  # gaps between token-carrying chunks
    e2e_s: float | None
    output_tokens: int | None  # usage.completion_tokens, else len(token_ids)
    finish_reason: str | None
    text: str  # generated text of choice 0 (kept in memory only; stored only if allowed)
    token_ids: tuple[int, ...] | None  # generated ids of choice 0 when known
    top_logprobs: tuple[dict[str, float], ...] | None = None  # per position, token -> logprob
    sampled_tokens: tuple[str, ...] | None = None  # token string per position (from logprobs)
    token_char_ends: tuple[int, ...] | None = None  # per token id: len(text) once it arrived
    error: str | None = None  # "timeout", "connect", "reset", "invalid_sse", "http_5xx", ...
    cancelled: bool = False  # client went away, request aborted
    answer: Answer | None = None  # every choice and field the client saw (memory only)
