"""Build a `Capture` from one backend's response while it is relayed (no I/O).

The mirror feeds raw bytes with `time.perf_counter()` stamps; timing follows
`vllm bench serve`: TTFT is the first chunk with a non-empty `choices` list,
whatever it carries (chat's role-only opening chunk, an empty text held back by
the detokenizer), so only the trailing usage chunk (`choices: []`) does not
count; ITL are the gaps between later chunks with choices. Per chunk only the
SSE framing is split: each event's data bytes are kept with their arrival time
and parsed in batches (every `BATCH_EVENTS` events and in `finish`), with orjson
when installed or as one JSON array otherwise, which is several times cheaper
than one parse per event and gives the same `Capture` (an event that breaks a
batch is parsed alone, as before). Logprobs are flattened once, in `finish`.

An answer that contradicts itself is an error of its own, never a match: a Responses
stream whose text deltas are not its final response's text ("stream_text_mismatch"),
a one-choice answer whose usage.completion_tokens is not the number of token ids it
sent ("usage_mismatch").
"""

from __future__ import annotations

import json
import json.scanner
import logging
import re
from collections.abc import Callable
from typing import Any

from proxy.capture.answer import (
    Answer,
    AnswerKind,
    ChoiceAnswer,
    ChoiceBuilder,
    response_output_tokens,
    responses_answer,
)
from proxy.capture.sse import DONE, SSEDecoder
from proxy.capture.types import Capture, Role

logger = logging.getLogger(__name__)

# The C scanner behind json.loads, minus its two whitespace regex passes per call.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)
_loads = json.loads
_fast_loads: Callable[[bytes], Any] | None
try:
    from orjson import loads as _fast_loads  # optional extra "fast"
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None
# The one difference orjson makes: an integer wider than 64 bits is read as a float, so
# a token id or token count that large is not taken (no tokenizer has such ids).
BATCH_EVENTS = 64  # bounds the bytes held per stream and each batch's time on the loop
# return_token_ids also echoes the prompt's ids (first chunk / body): cut before parsing.
_PROMPT_IDS_BYTES = re.compile(rb'"prompt_token_ids"\s*:\s*\[[^\]]*\]')
_LONG_EVENT_CHARS = 4096


class CaptureBuilder:
    """Accumulates one response (stream or not) and turns it into a `Capture`."""

    __slots__ = (
        "_body",
        "_char_ends",
        "_chars",
        "_decoder",
        "_done",
        "_error",
        "_extras",
        "_finish_reason",
        "_ids_partial",
        "_is_chat",
        "_itl",
        "_logprobs",
        "_pieces",
        "_raw",
        "_raw_t",
        "_response",
        "_stop_reason",
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
        self._ids_partial = False  # a chunk came without ids: they may not count every token
        self._char_ends: list[int] = []
        self._chars = 0
        self._logprobs: list[Any] = []
        self._finish_reason: str | None = None
        self._stop_reason: str | None = None
        self._extras: dict[int, ChoiceBuilder] | None = None  # choice -> what is not content
        self._response: dict[str, Any] | None = None  # a Responses-API answer's final object
        self._usage_tokens: int | None = None
        self._t_first: float | None = None
        self._t_last = 0.0
        self._itl: list[float] = []
        self._error: str | None = None
        self._done = False
        self._is_chat = False
        self._t_recv = t_start
        self._raw: list[bytes] = []  # data of events not parsed yet, and their arrival times
        self._raw_t: list[float] = []
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
            datas = decoder.feed_data(chunk)
        except ValueError:
            self._parse_pending()  # an earlier event's error comes first
            if self._error is None:
                self._error = "invalid_sse"
            return
        if datas:
            raw = self._raw
            raw += datas
            self._raw_t += [t] * len(datas)
            if len(raw) >= BATCH_EVENTS:
                self._parse_pending()

    def abandon(self, error: str) -> None:
        """Stop with `error` and let go of every byte held (a body over its cap is not
        parsed; its buffers are freed now, not when the capture is)."""
        if self._error is None:
            self._error = error
        self._body = []
        self._raw, self._raw_t = [], []
        self._decoder = None

    def on_body(self, chunk: bytes, t: float) -> None:
        """A piece of a non-streaming JSON body arrived (parsed once, in `finish`)."""
        self._body.append(chunk)
        self._t_last = t

    def finish(
        self, status: int | None, t: float, error: str | None = None, cancelled: bool = False
    ) -> Capture:
        """The response ended (or failed) at `t`: freeze everything into a `Capture`."""
        if self._decoder is not None and self._error is None:
            tail = self._decoder.flush_data()
            self._raw += tail
            self._raw_t += [self._t_recv] * len(tail)
            self._parse_pending()
        elif self._body and self._error is None and status is not None and status < 400:
            body = b"".join(self._body)
            if len(body) > _LONG_EVENT_CHARS:
                body = _PROMPT_IDS_BYTES.sub(b'"prompt_token_ids":null', body)
            # An unstreamed answer ends with its last byte's arrival, stamped alike on every
            # side; `t` is when the caller got round to finishing (a busy worker's later).
            t = self._t_last
            self._on_full_body(body, t)
        err = error or self._error
        if err is None and status is not None and status >= 400:
            err = "http_5xx" if status >= 500 else "http_4xx"
        if err is None and not cancelled and status is not None and not self._done \
                and (self._decoder is not None or self.stream):
            # vLLM ends every stream with [DONE]; without it the stream was cut or not SSE.
            err = "truncated" if self.events else "invalid_sse"
        top, sampled = _flatten_logprobs(self._logprobs, self._is_chat)
        text = "".join(self._pieces)
        answer = self._answer(text) if err is None else None
        if answer is not None and answer.kind == "responses":
            if self._decoder is not None and text != answer.choices[0].content:
                # What a streaming client shows is the deltas: a stream whose deltas are
                # not its final answer's text (none at all, say) is not that answer.
                err, answer = "stream_text_mismatch", None
            text = text or (answer.choices[0].content if answer is not None else "")
        ids = tuple(self._token_ids) if self._token_ids else None
        output_tokens = self._usage_tokens
        if output_tokens is None and ids is not None:
            output_tokens = len(ids)
        elif err is None and ids is not None and output_tokens is not None \
                and output_tokens != len(ids) \
                and (output_tokens < len(ids) or not self._ids_partial) \
                and not (self._extras and any(k != 0 for k in self._extras)):
            # One choice: usage counts exactly the ids it sent (vLLM sums len(token_ids)):
            # never fewer; more only where a chunk came without ids (one may hold a token).
            err, answer = "usage_mismatch", None
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
            text=text,
            token_ids=ids,
            top_logprobs=top,
            sampled_tokens=sampled,
            token_char_ends=tuple(self._char_ends) if ids is not None and self._decoder else None,
            error=err,
            cancelled=cancelled,
            answer=answer,
        )

    def _answer(self, text: str) -> Answer:
        """Every choice and field the client received (see proxy.capture.answer)."""
        if self._response is not None:
            return responses_answer(self._response)
        kind: AnswerKind = "chat" if self._is_chat else "completions"
        extras = self._extras
        if extras is None:  # choice 0's content only: what nearly every answer is
            return Answer(kind, (ChoiceAnswer(0, text, "", "", (), self._finish_reason,
                                              self._stop_reason),))
        first = extras.get(0) or ChoiceBuilder()
        first.finish_reason, first.stop_reason = self._finish_reason, self._stop_reason
        choices = [first.build(0, text)]
        choices += (extras[i].build(i) for i in sorted(extras) if i != 0)
        return Answer(kind, tuple(choices))

    def _extra(self, index: Any) -> ChoiceBuilder:
        """The builder of what choice `index` carries beyond choice 0's content."""
        extras = self._extras
        if extras is None:
            extras = self._extras = {}
        key = index if type(index) is int else 0
        builder = extras.get(key)
        if builder is None:
            builder = extras[key] = ChoiceBuilder()
        return builder

    def _parse_pending(self) -> None:
        """Parse the held events in arrival order, stopping at the first error."""
        raw, times = self._raw, self._raw_t
        if not raw:
            return
        self._raw, self._raw_t = [], []
        objs = _parse_batch(raw)
        for i, t in enumerate(times):
            if self._error is not None:
                return
            data = raw[i]
            if data == _DONE_BYTES:
                self._done = True
                continue
            obj = objs[i] if objs is not None else _parse_one(data)
            if type(obj) is not dict:
                self._error = "invalid_sse"
                return
            self._on_obj(obj, t)

    def _on_obj(self, obj: dict[str, Any], t: float) -> None:
        self.events += 1
        choices = obj.get("choices")
        if choices:
            if type(choices) is list and len(choices) == 1 and type(choices[0]) is dict:
                self._absorb_choice(choices[0])  # n=1, what nearly every stream is
            else:
                self._absorb_choices(choices)
            if self._error is None:  # any chunk with choices, output or not (vllm bench serve)
                if self._t_first is None:
                    self._t_first = t
                else:
                    self._itl.append(t - self._t_last)
                self._t_last = t
        elif type(obj.get("type")) is str and obj["type"].startswith("response."):
            self._on_response_event(obj, t)
            return
        elif "error" in obj or obj.get("object") == "error" or obj.get("type") == "error":
            self._error = "stream_error"
            logger.debug("%s sent a mid-stream error event", self.backend)
            return
        usage = obj.get("usage")
        if usage and type(usage) is dict:
            tokens = usage.get("completion_tokens")
            if type(tokens) is int:
                self._usage_tokens = tokens

    def _on_response_event(self, obj: dict[str, Any], t: float) -> None:
        """A Responses-API stream event: output deltas time it, the terminal one ends it."""
        kind = obj["type"]
        if kind.endswith(".delta"):
            if kind == "response.output_text.delta":
                piece = obj.get("delta")
                if piece and type(piece) is str:
                    self._pieces.append(piece)
                    self._chars += len(piece)
            if self._t_first is None:
                self._t_first = t
            else:
                self._itl.append(t - self._t_last)
            self._t_last = t
        elif kind in _RESPONSE_ENDS:
            self._done = True
            response = obj.get("response")
            if type(response) is dict:
                self._response = response
                self._usage_tokens = response_output_tokens(response)
            if kind == "response.failed":
                self._error = "stream_error"

    def _absorb_choices(self, choices: Any) -> bool:
        """Record choice 0's delta; True when any choice carries output."""
        if type(choices) is not list:
            self._error = "invalid_sse"
            return False
        carries = False
        for choice in choices:
            if type(choice) is not dict:
                self._error = "invalid_sse"
                return False
            carries = self._absorb_choice(choice) or carries
            if self._error is not None:
                return False
        return carries

    def _absorb_choice(self, choice: dict[str, Any]) -> bool:
        """Check one choice (recorded when it is choice 0); True when it carries output."""
        delta = choice.get("delta")
        if delta is None:
            piece = choice.get("text")
            has_output = bool(piece)
        else:
            self._is_chat = True
            if type(delta) is not dict:
                self._error = "invalid_sse"
                return False
            piece = delta.get("content")
            if piece and len(delta) == 1:
                has_output = True
            else:  # not a plain content delta: look further
                has_output = self._delta_parts(choice, delta, piece)
        if piece and type(piece) is not str:
            self._error = "invalid_sse"
            return False
        ids = choice.get("token_ids")
        if ids:
            if type(ids) is not list or not all(type(i) is int for i in ids):
                self._error = "invalid_sse"
                return False
            has_output = True
        if choice.get("index", 0) != 0:
            extra = self._extra(choice.get("index"))
            if piece:
                extra.content.append(piece)
            extra.ending(choice)
            return has_output
        if piece:
            self._pieces.append(piece)
            self._chars += len(piece)
        if ids:
            self._token_ids += ids
            self._char_ends += [self._chars] * len(ids)
        elif delta is None or "role" not in delta:
            self._ids_partial = True  # a chunk without ids: a token may have come in it
        logprobs = choice.get("logprobs")
        if logprobs:
            self._logprobs.append(logprobs)
        reason = choice.get("finish_reason")
        if type(reason) is str:
            self._finish_reason = reason
            stop = choice.get("stop_reason")
            self._stop_reason = None if stop is None else str(stop)
        return has_output

    def _delta_parts(self, choice: dict[str, Any], delta: dict[str, Any], piece: Any) -> bool:
        """A delta that may carry more than content: its other parts go to the choice's
        builder; True when it carries output."""
        if (delta.get("reasoning_content") or delta.get("reasoning")
                or delta.get("tool_calls") or delta.get("refusal")):
            self._extra(choice.get("index", 0)).delta(delta)
            return True
        return bool(piece)

    def _on_full_body(self, body: bytes, t: float) -> None:
        try:
            obj = _loads(body)
        except (ValueError, RecursionError):  # deeply nested: not an answer
            obj = None
        if type(obj) is dict and obj.get("object") == "response":
            self._response = obj  # the Responses API, unstreamed
            self._usage_tokens = response_output_tokens(obj)
            self._t_first = t
            return
        choices = obj.get("choices") if type(obj) is dict else None
        if type(choices) is not list or not choices:
            self._error = "invalid_json"
            return
        as_deltas = []
        for choice in choices:
            if type(choice) is not dict:
                self._error = "invalid_json"
                return
            message = choice.get("message")
            if type(message) is dict:  # chat: read the message as one delta
                self._is_chat = True
                choice = {**choice, "delta": message}
                del choice["message"]
            as_deltas.append(choice)
        if self._absorb_choices(as_deltas) or as_deltas[0].get("finish_reason") is not None:
            self._t_first = t
        usage = obj.get("usage")
        if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
            self._usage_tokens = usage["completion_tokens"]


_DONE_BYTES = DONE.encode()
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_INVALID = object()  # an event that is not one JSON value


def _parse_one(data: bytes) -> Any:
    """One event's JSON as the stdlib reads it (any value), or `_INVALID`."""
    if len(data) > _LONG_EVENT_CHARS:
        data = _PROMPT_IDS_BYTES.sub(b'"prompt_token_ids":null', data, count=1)
    try:
        text = data.decode("utf-8", "replace")
        if text[:1] == "{":
            obj, end = _scan_json(text, 0)
            if end != len(text) and text[end:].strip():
                return _INVALID  # trailing data
            return obj
        return _loads(text)
    except (ValueError, StopIteration, RecursionError):
        return _INVALID


def _parse_batch(raw: list[bytes]) -> list[Any] | None:
    """The events' objects from one parse ([DONE] gives None), or None for one by one.

    Each event becomes `[event]` on its own line inside one array: a JSON string cannot
    hold a raw newline, so none runs from one event into the next, and the shape check
    (one one-element list per event) rejects events that split or merge values. Only
    batches whose events all look like objects are parsed this way; any failure (also
    what only orjson rejects: NaN, lone surrogates) sends the batch to `_parse_one`.
    """
    objects = []
    for data in raw:
        if data[:1] == b"{" and len(data) <= _LONG_EVENT_CHARS:
            objects.append(data)
        elif data != _DONE_BYTES:
            return None
    if not objects:
        return [None] * len(raw)
    blob = b"[[" + b"]\n,[".join(objects) + b"]\n]"
    loads = _fast_loads if _fast_loads is not None else _loads
    try:
        parsed = loads(blob)
    except (ValueError, RecursionError):
        return None
    if len(parsed) != len(objects):
        return None
    out: list[Any] = []
    items = iter(parsed)
    for data in raw:
        if data == _DONE_BYTES:
            out.append(None)
            continue
        item = next(items)
        if len(item) != 1:
            return None
        out.append(item[0])
    return out


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
