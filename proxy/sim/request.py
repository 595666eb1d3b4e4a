"""Turn an OpenAI-style request body into the sampling parameters the simulator uses.

Validation follows vLLM's answers where it matters to a client (400 with an
`error` object naming the parameter); fields the simulator does not model are
accepted and ignored, like an engine that supports them but changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from proxy.sim.vocab import Vocab

Endpoint = Literal["completions", "chat"]
# vLLM 0.32 hands prompt text to its Hugging Face tokenizer, which refuses a string that
# is not valid Unicode (JSON can carry a lone surrogate, "\ud800") with this TypeError;
# vLLM answers it as a 400 BadRequestError with the message as is.
TOKENIZER_REFUSES = (
    "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]"
)


class RequestError(Exception):
    """A request vLLM would refuse: carries the HTTP status and the error fields."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def error_type(self) -> str:
        return {400: "BadRequestError", 404: "NotFoundError"}.get(
            self.status, "InternalServerError"
        )


@dataclass(frozen=True)
class SamplingSpec:
    """What one generation request asks for (the prompt only as ids and a hash)."""

    endpoint: Endpoint
    model: str | None
    prompt_ids: tuple[int, ...]
    prompt_key: bytes  # sha256 of the canonical prompt: the seed of deterministic output
    stream: bool
    include_usage: bool
    max_tokens: int | None
    min_tokens: int
    temperature: float
    seed: int | None
    ignore_eos: bool
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    n: int
    logprobs: int | None  # top-k alternatives per position; 0 = only the sampled token
    return_token_ids: bool

    @property
    def deterministic(self) -> bool:
        return self.temperature == 0 or self.seed is not None


def _number(body: dict[str, Any], name: str, default: float | None) -> float | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"{name} must be a number, got {value!r}", name)
    return float(value)


def _int(body: dict[str, Any], name: str, default: int | None, minimum: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name} must be an integer, got {value!r}", name)
    if value < minimum:
        raise RequestError(400, f"{name} must be at least {minimum}, got {value}", name)
    return value


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise RequestError(
        400, f"message content must be a string or a list of parts, got {content!r}", "messages"
    )


def chat_prompt(messages: Any) -> str:
    """The simulator's chat template: one `<|role|>` header per message."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list", "messages")
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError(400, f"each message needs a role, got {message!r}", "messages")
        parts.append(f"<|{message['role']}|>\n{_message_text(message.get('content'))}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def tokenizable(text: str) -> str:
    """`text`, or the 400 vLLM's tokenizer gives when it holds a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(400, TOKENIZER_REFUSES) from None
    return text


def _prompt_ids(endpoint: Endpoint, body: dict[str, Any], vocab: Vocab) -> tuple[int, ...]:
    if endpoint == "chat":
        return tuple(vocab.tokenize(tokenizable(chat_prompt(body.get("messages")))))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tuple(vocab.tokenize(tokenizable(prompt)))
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        if not all(0 <= t < vocab.size for t in prompt):
            raise RequestError(400, f"prompt token ids must be in 0..{vocab.size - 1}", "prompt")
        return tuple(prompt)
    raise RequestError(
        400, "prompt must be a string or a list of token ids (one prompt per request)", "prompt"
    )


def _logprobs(endpoint: Endpoint, body: dict[str, Any]) -> int | None:
    if endpoint == "chat":
        if not body.get("logprobs"):
            return None
        return _int(body, "top_logprobs", 0, 0)
    return _int(body, "logprobs", None, 0)


def parse_request(endpoint: Endpoint, body: Any, vocab: Vocab, max_model_len: int) -> SamplingSpec:
    if not isinstance(body, dict):
        raise RequestError(400, f"request body must be a JSON object, got {type(body).__name__}")
    prompt_ids = _prompt_ids(endpoint, body, vocab)
    if len(prompt_ids) >= max_model_len:
        raise RequestError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {len(prompt_ids)} input tokens.",
            "prompt",
        )
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(s for s in stop if isinstance(s, str) and s)
    stream_options = body.get("stream_options") or {}
    max_tokens = _int(body, "max_completion_tokens", None, 1) if endpoint == "chat" else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None, 1)
    logprobs = _logprobs(endpoint, body)
    if logprobs is not None and logprobs > 20:
        raise RequestError(400, f"logprobs must be at most 20, got {logprobs}", "logprobs")
    temperature = _number(body, "temperature", 1.0)
    if temperature is not None and temperature < 0:
        raise RequestError(400, f"temperature must be >= 0, got {temperature}", "temperature")
    n = _int(body, "n", 1, 1)
    return SamplingSpec(
        endpoint=endpoint,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        prompt_ids=prompt_ids,
        prompt_key=hashlib.sha256(json.dumps(prompt_ids).encode()).digest(),
        stream=bool(body.get("stream", False)),
        include_usage=bool(
            isinstance(stream_options, dict) and stream_options.get("include_usage")
        ),
        max_tokens=max_tokens,
        min_tokens=_int(body, "min_tokens", 0, 0) or 0,
        temperature=1.0 if temperature is None else temperature,
        seed=_int(body, "seed", None, -(2**63)),
        ignore_eos=bool(body.get("ignore_eos", False)),
        stop=stop,
        stop_token_ids=tuple(t for t in body.get("stop_token_ids") or () if isinstance(t, int)),
        n=1 if n is None else n,
        logprobs=logprobs,
        return_token_ids=bool(body.get("return_token_ids", False)),
    )
