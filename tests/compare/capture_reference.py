"""The capture as it was before batched parsing: one JSON parse per event (test oracle).

Frozen copy of proxy/compare/capture.py's per-event implementation; test_capture_fast.py
checks that the batched builder gives the same `Capture` on many generated streams.
Original description follows.

The mirror feeds raw bytes with `time.perf_counter()` stamps; timing follows
`vllm bench serve`: TTFT is the first chunk with a non-empty `choices` list,
whatever it carries (chat's role-only opening chunk, an empty text held back by
the detokenizer), so only the trailing usage chunk (`choices: []`) does not
count; ITL are the gaps between later chunks with choices. Per event only the
JSON is parsed and a few references kept; logprobs are flattened once, in `finish`.
"""

from __future__ import annotations

import json
import json.scanner
import logging
import re
from collections.abc import Callable
from typing import Any

from proxy.compare.sse import DONE, SSEDecoder
from proxy.compare.types import Capture, Role

logger = logging.getLogger(__name__)

# The C scanner behind json.loads, minus its two whitespace regex passes per call.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)
_loads = json.loads
# return_token_ids also echoes the prompt's ids (first chunk / body): cut before parsing.
_PROMPT_IDS = re.compile(r'"prompt_token_ids"\s*:\s*\[[^\]]*\]')
_PROMPT_IDS_BYTES = re.compile(rb'"prompt_token_ids"\s*:\s*\[[^\]]*\]')
_LONG_EVENT_CHARS = 4096
_CHAT_OUTPUT_KEYS = ("content", "reasoning_content", "reasoning", "tool_calls")


class CaptureBuilder:
    """Accumulates one response (stream or not) and turns it into a `Capture`."""

    __slots__ = (
        "_body",
        "_char_ends",
        "_chars",
        "_decoder",
        "_done",
        "_error",
        "_finish_reason",
        "_is_chat",
        "_itl",
        "_logprobs",
        "_pieces",
        "_t_first",
        "_t_last",
        "_t_recv",
        "_token_ids",
        "_usage_tokens",
        "backend",
        "events",
        "role",
        "stream",
        "t_start",
    )

    def __init__(
        self, role: Role, backend: str, t_start: float, *, stream: bool = False
    ) -> None:
        self.role: Role = role
        self.stream = stream  # a stream was requested: an empty body is then an error too
        self.backend = backend
        self.t_start = t_start
        self._decoder: SSEDecoder | None = None
        self._body: list[bytes] = []
        self._pieces: list[str] = []
        self._token_ids: list[int] = []
        self._char_ends: list[int] = []
        self._chars = 0
        self._logprobs: list[Any] = []
        self._finish_reason: str | None = None
        self._usage_tokens: int | None = None
        self._t_first: float | None = None
        self._t_last = 0.0
        self._itl: list[float] = []
        self._error: str | None = None
        self._done = False
        self._is_chat = False
        self._t_recv = t_start
        self.events = 0

    @property
    def error(self) -> str | None:
        """First error seen so far (the mirror may stop reading the shadow on it)."""
        return self._error

    def on_chunk(self, chunk: bytes, t: float) -> None:
        """A piece of an SSE stream arrived at perf_counter time `t`."""
        if self._error is not None:
            return
        self._t_recv = t
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = SSEDecoder()
        try:
            events = decoder.feed(chunk)
        except ValueError:
            self._error = "invalid_sse"
            return
        for event in events:
            self._on_data(event.data, t)

    def on_body(self, chunk: bytes, t: float) -> None:
        """A piece of a non-streaming JSON body arrived (parsed once, in `finish`)."""
        self._body.append(chunk)
        self._t_last = t

    def finish(
        self, status: int | None, t: float, error: str | None = None, cancelled: bool = False
    ) -> Capture:
        """The response ended (or failed) at `t`: freeze everything into a `Capture`."""
        if self._decoder is not None and self._error is None:
            for event in self._decoder.flush():
                self._on_data(event.data, self._t_recv)
        elif self._body and self._error is None and status is not None and status < 400:
            body = b"".join(self._body)
            if len(body) > _LONG_EVENT_CHARS:
                body = _PROMPT_IDS_BYTES.sub(b'"prompt_token_ids":null', body)
            self._on_full_body(body, t)
        err = error or self._error
        if err is None and status is not None and status >= 400:
            err = "http_5xx" if status >= 500 else "http_4xx"
        if err is None and not cancelled and status is not None and not self._done \
                and (self._decoder is not None or self.stream):
            # vLLM ends every stream with [DONE]; without it the stream was cut or not SSE.
            err = "truncated" if self.events else "invalid_sse"
        top, sampled = _flatten_logprobs(self._logprobs, self._is_chat)
        ids = tuple(self._token_ids) if self._token_ids else None
        output_tokens = self._usage_tokens
        if output_tokens is None and ids is not None:
            output_tokens = len(ids)
        e2e = t - self.t_start if status is not None else None
        ttft = self._t_first - self.t_start if self._t_first is not None else None
        return Capture(
            role=self.role,
            backend=self.backend,
            status=status,
            ttft_s=ttft,
            itl_s=tuple(self._itl),
            e2e_s=e2e,
            output_tokens=output_tokens,
            finish_reason=self._finish_reason,
            text="".join(self._pieces),
            token_ids=ids,
            top_logprobs=top,
            sampled_tokens=sampled,
            token_char_ends=tuple(self._char_ends) if ids is not None and self._decoder else None,
            error=err,
            cancelled=cancelled,
        )

    def _on_data(self, data: str, t: float) -> None:
        if self._error is not None:
            return
        if data == DONE:
            self._done = True
            return
        if len(data) > _LONG_EVENT_CHARS:
            data = _PROMPT_IDS.sub('"prompt_token_ids":null', data, count=1)
        try:
            if data[:1] == "{":
                obj, end = _scan_json(data, 0)
                if end != len(data) and data[end:].strip():
                    raise ValueError("trailing data")
            else:
                obj = _loads(data)
        except (ValueError, StopIteration):
            self._error = "invalid_sse"
            return
        if type(obj) is not dict:
            self._error = "invalid_sse"
            return
        self.events += 1
        choices = obj.get("choices")
        if choices:
            self._absorb_choices(choices)
            if self._error is None:  # any chunk with choices, output or not (vllm bench serve)
                if self._t_first is None:
                    self._t_first = t
                else:
                    self._itl.append(t - self._t_last)
                self._t_last = t
        elif "error" in obj or obj.get("object") == "error":
            self._error = "stream_error"
            logger.debug("%s sent a mid-stream error event", self.backend)
            return
        usage = obj.get("usage")
        if usage and type(usage) is dict:
            tokens = usage.get("completion_tokens")
            if type(tokens) is int:
                self._usage_tokens = tokens

    def _absorb_choices(self, choices: Any) -> bool:
        """Record choice 0's delta; True when any choice carries output."""
        carries = False
        try:
            for choice in choices:
                delta = choice.get("delta")
                if delta is not None:
                    self._is_chat = True
                    piece = delta.get("content")
                    has_output = bool(piece) or any(delta.get(k) for k in _CHAT_OUTPUT_KEYS[1:])
                else:
                    piece = choice.get("text")
                    has_output = bool(piece)
                if piece and type(piece) is not str:
                    raise TypeError("content is not a string")
                ids = choice.get("token_ids")
                if ids:
                    if type(ids) is not list or not all(type(i) is int for i in ids):
                        raise TypeError("token_ids is not a list of ints")
                    has_output = True
                carries = carries or has_output
                if choice.get("index", 0) != 0:
                    continue
                if piece:
                    self._pieces.append(piece)
                    self._chars += len(piece)
                if ids:
                    self._token_ids.extend(ids)
                    self._char_ends.extend([self._chars] * len(ids))
                logprobs = choice.get("logprobs")
                if logprobs:
                    self._logprobs.append(logprobs)
                reason = choice.get("finish_reason")
                if type(reason) is str:
                    self._finish_reason = reason
        except (AttributeError, TypeError):
            self._error = "invalid_sse"
            return False
        return carries

    def _on_full_body(self, body: bytes, t: float) -> None:
        try:
            obj = _loads(body)
            choice = obj["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            self._error = "invalid_json"
            return
        if not isinstance(choice, dict):
            self._error = "invalid_json"
            return
        message = choice.get("message")
        if isinstance(message, dict):
            self._is_chat = True
            as_delta = {**choice, "delta": message}
            del as_delta["message"]
            choice = as_delta
        if self._absorb_choices([choice]) or choice.get("finish_reason") is not None:
            self._t_first = t
        usage = obj.get("usage")
        if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
            self._usage_tokens = usage["completion_tokens"]


def _flatten_logprobs(
    parts: list[Any], is_chat: bool
) -> tuple[tuple[dict[str, float], ...] | None, tuple[str, ...] | None]:
    """Per position: top-k token -> logprob, and the sampled token string."""
    if not parts:
        return None, None
    top: list[dict[str, float]] = []
    sampled: list[str] = []
    try:
        for part in parts:
            if is_chat:
                for pos in part.get("content") or ():
                    sampled.append(_str(pos.get("token")))
                    top.append({_str(e["token"]): e["logprob"] for e in pos.get("top_logprobs") or ()})
            else:
                sampled.extend(_str(tok) for tok in part.get("tokens") or ())
                top.extend({_str(k): v for k, v in d.items()} if d else {}
                           for d in part.get("top_logprobs") or ())
    except (AttributeError, TypeError, KeyError):
        return None, None
    return tuple(top), tuple(sampled)


def _str(value: Any) -> str:
    return value if type(value) is str else ""
