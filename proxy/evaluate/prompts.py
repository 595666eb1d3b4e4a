"""A prompt set (the user's JSONL, or the proxy's records) as greedy requests with logprobs.

Each line is a completions request (`prompt`), a chat request (`messages`) or a
Responses-API request (`input`, sent to /v1/responses), as a client would send it;
everything but the sampling is kept. Responses-API answers carry no token ids or
logprobs: they are compared on their fields (proxy.compare.fields) only. The eval needs the old engine's
deterministic answer with its top-k alternatives, so every request is made greedy
(`temperature: 0`), streamed (TTFT and ITL are measured as `vllm bench serve` does),
and asks for token ids and `logprobs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.capture.types import Endpoint
from proxy.evaluate.jsonl import EvalInputError, read_objects

SAMPLING_KEYS = ("top_p", "top_k", "min_p", "seed", "n", "best_of", "use_beam_search")


@dataclass(frozen=True)
class EvalRequest:
    """One request of the set: where it goes and the body sent (model filled in later)."""

    endpoint: Endpoint
    body: dict[str, Any]
    source: str  # "FILE:LINE" or "records:ID", for messages

    @property
    def path(self) -> str:
        return {"chat": "/v1/chat/completions", "responses": "/v1/responses"}.get(
            self.endpoint, "/v1/completions")


def endpoint_of(obj: dict[str, Any], source: str) -> Endpoint:
    if isinstance(obj.get("messages"), list):
        return "chat"
    if "prompt" in obj:
        return "completions"
    if "input" in obj:
        return "responses"
    raise EvalInputError(f"{source}: a request needs 'prompt' (completions), 'messages' "
                         f"(chat) or 'input' (Responses API); got keys {sorted(obj)[:8]}")


def greedy_body(obj: dict[str, Any], endpoint: Endpoint, *, logprobs: int,
                max_tokens: int) -> dict[str, Any]:
    """The request made greedy, streamed, with token ids and top-`logprobs` alternatives."""
    body = {k: v for k, v in obj.items() if k not in SAMPLING_KEYS}
    body["temperature"] = 0
    body["stream"] = True
    if endpoint == "responses":  # no token ids, logprobs or stream_options there
        if body.get("max_output_tokens") is None:
            body["max_output_tokens"] = max_tokens
        return body
    body["stream_options"] = {"include_usage": True}
    body["return_token_ids"] = True
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = max_tokens
    if endpoint == "chat":
        body["logprobs"] = True
        body["top_logprobs"] = logprobs
    else:
        body["logprobs"] = logprobs
    return body


def read_prompts(path: str, *, logprobs: int, max_tokens: int) -> list[EvalRequest]:
    """The prompt set of `path`; EvalInputError names the line of a bad one."""
    out = []
    for number, obj in read_objects(path, "prompt set"):
        source = f"{path}:{number}"
        endpoint = endpoint_of(obj, source)
        out.append(EvalRequest(endpoint, greedy_body(obj, endpoint, logprobs=logprobs,
                                                     max_tokens=max_tokens), source))
    if not out:
        raise EvalInputError(f"{path}: no requests in the prompt set")
    return out
