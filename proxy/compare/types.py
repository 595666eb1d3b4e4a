"""Values shared by the mirror, the comparison, the store and the report (CONTRACT).

Everything here is a frozen value: the mirror builds `Capture`s while relaying,
the comparison turns two of them into a `Comparison`, the store persists
`ExchangeRecord`s and the gate reads aggregates back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.compare.answer import Answer

Role = Literal["primary", "shadow", "baseline"]
Endpoint = Literal["completions", "chat", "responses"]
Outcome = Literal["match", "diverged", "not_comparable", "error"]


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


@dataclass(frozen=True)
class Comparison:
    """Shadow (or baseline) vs primary for one request."""

    against: Role  # "shadow" or "baseline": which side was compared with the primary
    outcome: Outcome
    exact_match: bool
    first_divergence: int | None  # token index of the first difference, None if equal
    edit_distance: int | None  # token-level Levenshtein
    length_delta: int | None  # other - primary output tokens
    finish_reason_match: bool | None
    close_match: bool | None  # vLLM rule: each token at first divergence in the other's top-k
    reason: str = ""  # why not comparable / what differed
    basis: str = "token_ids"  # what decided: "token_ids", "logprob_tokens", "text",
    # "tool_calls", "value" (finish/stop reason, status) or "choices" (their count)
    field: str | None = None  # the field that diverged first (proxy.compare.fields)
    choice: int | None = None  # the choice it diverged in


@dataclass(frozen=True)
class ExchangeRecord:
    """Everything kept about one mirrored request (no prompt/completion text unless enabled)."""

    request_id: str
    started_unix: float
    meta: RequestMeta
    captures: tuple[Capture, ...]
    comparisons: tuple[Comparison, ...]
    extra: dict[str, Any] = field(default_factory=dict)
