"""What the proxy learns from a generation request body, and the body sent to shadows (no I/O).

The primary always receives the client's bytes untouched. Shadow and baseline
receive the same request with `return_token_ids: true` added (vLLM 0.10.2+), so
their token ids are known without changing what they generate; logprob settings
are kept as the client asked, so closeness can be judged where the client asked
for logprobs. Malformed JSON yields None: such requests are relayed, not mirrored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from proxy.compare.types import Endpoint, RequestMeta

# Keys that change transport or bookkeeping, not what the model generates.
VOLATILE_KEYS = frozenset({"stream", "stream_options", "user", "return_token_ids"})

_PATH_ENDPOINTS: dict[str, Endpoint] = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
}
# Responses-API requests that depend on state the shadow does not have: not mirrored,
# counted as shed under this reason (the key's bytes are looked for before parsing).
STATEFUL_KEYS = (("previous_response_id", "responses_previous_response"),
                 ("conversation", "responses_conversation"),
                 ("background", "responses_background"))


@dataclass(frozen=True)
class PreparedRequest:
    """A parsed mirrored request: its metadata and the body for shadow/baseline."""

    meta: RequestMeta
    shadow_body: bytes


def endpoint_for_path(path: str) -> Endpoint | None:
    """The mirrored endpoint served at `path`, or None for paths that are only relayed."""
    return _PATH_ENDPOINTS.get(path.rstrip("/") or path)


def unmirrorable(body: bytes, endpoint: Endpoint) -> str | None:
    """Why a Responses-API request must not be mirrored (it continues a stored response or
    conversation, or runs in the background to be fetched later), else None. Cheap enough
    for the client path: the body is parsed only when one of the keys occurs in it."""
    if endpoint != "responses" or not any(key.encode() in body for key, _ in STATEFUL_KEYS):
        return None
    req = parse_body(body)
    if req is None:
        return None  # malformed: counted where it is parsed
    for key, reason in STATEFUL_KEYS:
        if req.get(key) not in (None, False, ""):
            return reason
    return None


def parse_body(body: bytes | dict[str, Any]) -> dict[str, Any] | None:
    """The request as a JSON object, or None when it is not one."""
    if isinstance(body, dict):
        return body
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def is_deterministic(req: dict[str, Any]) -> bool:
    """Greedy or seeded sampling. A missing temperature is vLLM's default 1.0: sampled."""
    if req.get("seed") is not None:
        return True
    temperature = req.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) \
            and temperature == 0:
        return True
    top_k = req.get("top_k")
    return type(top_k) is int and top_k == 1


def prompt_sha256(req: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the request minus VOLATILE_KEYS."""
    kept = {k: v for k, v in req.items() if k not in VOLATILE_KEYS}
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def request_meta(body: bytes | dict[str, Any], endpoint: Endpoint) -> RequestMeta | None:
    """Metadata of a generation request (no text kept), or None when the body is malformed."""
    req = parse_body(body)
    if req is None:
        return None
    n = req.get("n")
    return RequestMeta(
        endpoint=endpoint,
        stream=req.get("stream") is True,
        deterministic=is_deterministic(req),
        prompt_sha256=prompt_sha256(req),
        prompt_chars=_prompt_chars(req, endpoint),
        max_tokens=_int_or_none(req.get("max_completion_tokens"))
        or _int_or_none(req.get("max_tokens")) or _int_or_none(req.get("max_output_tokens")),
        n=n if type(n) is int and n > 0 else 1,
        logprobs_k=_logprobs_k(req, endpoint),
    )


def json_bytes(value: Any, compact: bool = True) -> bytes:
    """`value` as JSON for the wire: UTF-8, or \\u escapes where a string holds a lone
    surrogate (a client may send `"\\ud800"`; raw, it is not UTF-8 and a backend refuses it)."""
    separators = (",", ":") if compact else None
    try:
        return json.dumps(value, ensure_ascii=False, separators=separators).encode()
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=separators).encode()


def shadow_body(body: bytes | dict[str, Any], *, return_token_ids: bool = True) -> bytes | None:
    """Body for shadow/baseline: the client's request plus `return_token_ids`; None if malformed."""
    req = parse_body(body)
    if req is None:
        return None
    if not return_token_ids or req.get("return_token_ids") is True:
        if isinstance(body, (bytes, bytearray)):
            return bytes(body)
        return json_bytes(req, compact=False)
    out = dict(req)
    out["return_token_ids"] = True
    return json_bytes(out)


def prepare(body: bytes, endpoint: Endpoint) -> PreparedRequest | None:
    """Parse once, return metadata and shadow body; None when the body is not a JSON object."""
    req = parse_body(body)
    if req is None:
        return None
    meta = request_meta(req, endpoint)
    # The Responses API has no return_token_ids: its ids come from /tokenize.
    shadow = body if req.get("return_token_ids") is True or endpoint == "responses" \
        else shadow_body(req)
    if meta is None or shadow is None:
        return None
    return PreparedRequest(meta=meta, shadow_body=shadow)


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def _logprobs_k(req: dict[str, Any], endpoint: Endpoint) -> int | None:
    if endpoint == "responses":
        return None
    logprobs = req.get("logprobs")
    if endpoint == "chat":
        if logprobs is not True:
            return None
        top = req.get("top_logprobs")
        return top if type(top) is int else 0
    return logprobs if type(logprobs) is int and not isinstance(logprobs, bool) else None


def _prompt_chars(req: dict[str, Any], endpoint: Endpoint) -> int:
    """Characters of prompt text (token-id prompts count one per id)."""
    if endpoint == "completions":
        return _text_len(req.get("prompt"))
    if endpoint == "responses":
        return _text_len(req.get("input")) + _text_len(req.get("instructions"))
    total = 0
    messages = req.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                total += _text_len(message.get("content"))
    return total


def _text_len(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return 1
    if isinstance(value, dict):
        return _text_len(value.get("text") if "text" in value else value.get("content"))
    if isinstance(value, list):
        return sum(_text_len(v) for v in value)
    return 0
