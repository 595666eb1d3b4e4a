"""The answer as the client receives it, every choice and field (no I/O).

A `CaptureBuilder` keeps choice 0's content on its fast path (plain content streams
pay nothing here); everything else a client sees is gathered by a `ChoiceBuilder` per
choice: reasoning (`reasoning` or `reasoning_content`), refusal, tool calls assembled
from streamed deltas per `index` (the name from the first delta that has one, the
arguments concatenated), finish and stop reason. A Responses-API answer is read from
its `response` object (unstreamed body, or the terminal `response.completed` /
`response.incomplete` event of a stream): output text, function calls, reasoning
items, `status` and `incomplete_details`, as one choice.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

AnswerKind = Literal["chat", "completions", "responses"]


class ToolCall(NamedTuple):
    """One function call as the client receives it (the call `id` is not kept: it is random)."""

    name: str
    arguments: str


class ChoiceAnswer(NamedTuple):
    """One choice: `content` is chat's content, completions' text (with echo), or the
    Responses API's output text. (Named tuples: built once per capture, cheaply.)"""

    choice: int  # its index
    content: str = ""
    reasoning: str = ""
    refusal: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    stop_reason: str | None = None  # a stop string, or a stop token id as text


class Answer(NamedTuple):
    """Every choice of one answer; `status`/`incomplete_reason` only for the Responses API."""

    kind: AnswerKind
    choices: tuple[ChoiceAnswer, ...]
    status: str | None = None
    incomplete_reason: str | None = None
    digested: bool = False  # every text a keyed hash (proxy.compare.digest): no positions


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [v for v in value if type(v) is dict] if type(value) is list else []


def _text(value: Any) -> str:
    return value if type(value) is str else ""


class ChoiceBuilder:
    """The non-fast-path parts of one choice, fed delta by delta (or one whole message)."""

    __slots__ = ("content", "finish_reason", "reasoning", "refusal", "stop_reason", "tools")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tools: dict[int, list[Any]] = {}  # index -> [name, argument pieces]
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None

    def delta(self, delta: dict[str, Any]) -> None:
        """A chat delta's (or message's) parts other than the content."""
        piece = delta.get("reasoning") or delta.get("reasoning_content")
        if piece and type(piece) is str:
            self.reasoning.append(piece)
        piece = delta.get("refusal")
        if piece and type(piece) is str:
            self.refusal.append(piece)
        calls = delta.get("tool_calls")
        if calls and type(calls) is list:
            for position, call in enumerate(calls):
                if type(call) is dict:
                    self._tool_delta(call, position)

    def _tool_delta(self, call: dict[str, Any], position: int) -> None:
        index = call.get("index")
        if type(index) is not int:
            index = position  # an unstreamed message lists its calls in order, unindexed
        slot = self.tools.setdefault(index, ["", []])
        function = call.get("function")
        if type(function) is not dict:
            return
        name = function.get("name")
        if name and type(name) is str and not slot[0]:
            slot[0] = name
        arguments = function.get("arguments")
        if arguments and type(arguments) is str:
            slot[1].append(arguments)

    def ending(self, choice: dict[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if type(reason) is str:
            self.finish_reason = reason
            stop = choice.get("stop_reason")
            self.stop_reason = None if stop is None else str(stop)

    def build(self, index: int, content: str | None = None) -> ChoiceAnswer:
        calls = tuple(ToolCall(name, "".join(pieces))
                      for _, (name, pieces) in sorted(self.tools.items()))
        return ChoiceAnswer(
            choice=index, content="".join(self.content) if content is None else content,
            reasoning="".join(self.reasoning), refusal="".join(self.refusal),
            tool_calls=calls, finish_reason=self.finish_reason, stop_reason=self.stop_reason)


def responses_answer(response: dict[str, Any]) -> Answer:
    """A Responses-API `response` object as the client sees it."""
    content: list[str] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    calls: list[ToolCall] = []
    for item in _dicts(response.get("output")):
        kind = item.get("type")
        if kind == "function_call":
            calls.append(ToolCall(_text(item.get("name")), _text(item.get("arguments"))))
        elif kind in ("message", "reasoning"):
            parts = item.get("content")
            for part in _dicts(parts):
                ptype = part.get("type")
                if ptype == "output_text":
                    content.append(_text(part.get("text")))
                elif ptype == "refusal":
                    refusal.append(_text(part.get("refusal")))
                elif ptype in ("reasoning_text", "reasoning"):
                    reasoning.append(_text(part.get("text")))
            if kind == "reasoning" and not parts:
                reasoning.extend(_text(s.get("text")) for s in _dicts(item.get("summary")))
    details = response.get("incomplete_details")
    reason = details.get("reason") if type(details) is dict else None
    status = response.get("status")
    choice = ChoiceAnswer(0, "".join(content), "".join(reasoning), "".join(refusal),
                          tuple(calls))
    return Answer("responses", (choice,), status if type(status) is str else None,
                  reason if type(reason) is str else None)


def response_output_tokens(response: dict[str, Any]) -> int | None:
    usage = response.get("usage")
    if type(usage) is dict:
        tokens = usage.get("output_tokens")
        if type(tokens) is int:
            return tokens
    return None


def answer_json(answer: Answer) -> dict[str, Any]:
    """`answer` as JSON (it holds the text: store it only where text may be kept)."""
    return {"kind": answer.kind, "status": answer.status,
            "incomplete_reason": answer.incomplete_reason, "digested": answer.digested,
            "choices": [{**c._asdict(), "tool_calls": [list(t) for t in c.tool_calls]}
                        for c in answer.choices]}


def answer_from_json(obj: Any) -> Answer | None:
    """An answer written by `answer_json` (None stays None); ValueError on a bad shape."""
    if obj is None:
        return None
    try:
        choices = tuple(ChoiceAnswer(**{**c, "tool_calls": tuple(
            ToolCall(str(name), str(arguments)) for name, arguments in c["tool_calls"])})
            for c in obj["choices"])
        return Answer(obj["kind"], choices, obj.get("status"), obj.get("incomplete_reason"),
                      obj.get("digested") is True)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an answer: {exc}") from None
