"""What the proxy learns from a generation request body, and the body sent to shadows (no I/O).

The primary always receives the client's bytes untouched. Shadow and baseline
receive the same request with `return_token_ids: true` added (vLLM 0.10.2+), so
their token ids are known without changing what they generate; logprob settings
are kept as the client asked, so closeness can be judged where the client asked
for logprobs.

The request's meaning is read once, by `read_request` (a JSON object, at most
`MAX_DEPTH` levels deep and `max_bytes` long); every decision (stateful or not,
deterministic or not, mirrored or not) reads that parse, never the raw bytes, so
escaped keys (`"previous\\u005fresponse_id"`) mean what they mean to the engine. A body
it refuses is relayed untouched and not mirrored.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from proxy.capture.types import Endpoint, RequestMeta

# Keys that change transport or bookkeeping, not what the model generates.
VOLATILE_KEYS = frozenset({"stream", "stream_options", "user", "return_token_ids"})

_PATH_ENDPOINTS: dict[str, Endpoint] = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
}
# Responses-API requests that depend on state the shadow does not have: not mirrored,
# counted as shed under this reason.
STATEFUL_KEYS = (("previous_response_id", "responses_previous_response"),
                 ("conversation", "responses_conversation"),
                 ("background", "responses_background"))


# Deeper than any OpenAI request (JSON schemas of tools included) and far below the
# recursion limit of Python's parser, which a 5,000-deep body would otherwise hit.
MAX_DEPTH = 128
UNREADABLE = "malformed_json"  # the shed reason of a body read_request refuses
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class UnreadableRequest(ValueError):
    """The body is not a JSON object within the limits (the message says which)."""


def read_request(body: bytes, max_bytes: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The request as a JSON object, read once within `max_bytes` and `max_depth`."""
    if len(body) > max_bytes:
        raise UnreadableRequest(f"{len(body)} bytes, over the limit of {max_bytes}")
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b"", body)):
        if match.group() in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > max_depth:
                    raise UnreadableRequest(f"nested more than {max_depth} levels deep")
        else:
            depth -= 1
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UnreadableRequest(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UnreadableRequest(f"a JSON {type(obj).__name__}, not an object")
    return obj


@dataclass(frozen=True)
class PreparedRequest:
    """A parsed mirrored request: its metadata and the body for shadow/baseline."""

    meta: RequestMeta
    shadow_body: bytes
    request: dict[str, Any]


def endpoint_for_path(path: str) -> Endpoint | None:
    """The mirrored endpoint served at `path`, or None for paths that are only relayed."""
    return _PATH_ENDPOINTS.get(path.rstrip("/") or path)


def unmirrorable(req: dict[str, Any], endpoint: Endpoint) -> str | None:
    """Why a Responses-API request must not be mirrored (it continues a stored response or
    conversation, or runs in the background to be fetched later), else None."""
    if endpoint != "responses":
        return None
    for key, reason in STATEFUL_KEYS:
        if req.get(key) not in (None, False, ""):
            return reason
    return None


def parse_body(body: bytes | dict[str, Any]) -> dict[str, Any] | None:
    """The request as a JSON object (read_request, no size limit but the caller's), or None."""
    if isinstance(body, dict):
        return body
    try:
        return read_request(body, len(body))
    except UnreadableRequest:
        return None


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
    return _shadow_bytes(req, body if isinstance(body, (bytes, bytearray)) else None,
                         return_token_ids)


def _shadow_bytes(req: dict[str, Any], original: bytes | None, return_token_ids: bool) -> bytes:
    if not return_token_ids or req.get("return_token_ids") is True:
        return bytes(original) if original is not None else json_bytes(req, compact=False)
    out = dict(req)
    out["return_token_ids"] = True
    return json_bytes(out)


def prepare(body: bytes | dict[str, Any], endpoint: Endpoint) -> PreparedRequest | None:
    """Metadata and shadow body of the request (read by read_request); None when the body
    is not a JSON object."""
    req = parse_body(body)
    if req is None:
        return None
    meta = request_meta(req, endpoint)
    # The Responses API has no return_token_ids: its ids come from /tokenize.
    if meta is None:
        return None
    shadow = _shadow_bytes(req, body if isinstance(body, (bytes, bytearray)) else None,
                           endpoint != "responses")
    return PreparedRequest(meta=meta, shadow_body=shadow, request=req)


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
