"""Compare two answers field by field, every choice, as the client receives them (no I/O).

Per choice, in the order a client reads them: `reasoning`, `content` (chat content,
completions text, Responses output text), `refusal`, `tool_calls`, `finish_reason`,
`stop_reason`; then, for the Responses API, `status` (with `incomplete_details`). Text
fields are compared as strings (first differing character); tool calls by count, then
per call the function `name` exactly and the `arguments` as JSON values when both parse
(canonical JSON: `1` and `1.0`, `true` and `1` differ), else as strings, with the first
differing character of the argument strings. The call `id` is ignored (it is random).
A differing number of choices is field `choices`. No text is put in a `FieldDiff`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.capture.answer import Answer, ChoiceAnswer, ToolCall

# Every field a divergence can be counted on, in the order they are checked.
FIELDS = ("choices", "reasoning", "content", "text", "refusal", "tool_calls", "finish_reason",
          "stop_reason", "logprobs", "status")
_TEXT_FIELDS = ("reasoning", "content", "refusal")


@dataclass(frozen=True)
class FieldDiff:
    """The first difference found in one field of one choice."""

    field: str
    choice: int
    basis: str  # "text", "tool_calls", "value" or "choices"
    position: int | None  # first differing character (text, arguments), else None
    detail: str  # what differed, without the text itself


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first differing element (character, token; the shorter length if one
    is a prefix of the other), or None when equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_answers(primary: Answer, other: Answer) -> list[FieldDiff]:
    """Every field that differs (first difference per field and choice), in reading order.
    Digested answers (both sides, proxy.compare.digest) tell the field, not the position."""
    if primary == other:  # tuples all the way down: one comparison in C
        return []
    if primary.digested or other.digested:
        if primary.digested != other.digested:
            raise ValueError("a digested answer compares only with a digested one")
        return [replace(d, position=None, detail=f"{d.field} differs (keyed hash)")
                for d in _compare(primary, other)]
    return _compare(primary, other)


def _compare(primary: Answer, other: Answer) -> list[FieldDiff]:
    diffs: list[FieldDiff] = []
    if len(primary.choices) != len(other.choices):
        diffs.append(FieldDiff("choices", 0, "choices", None,
                               f"{len(primary.choices)} vs {len(other.choices)} choices"))
    text_name = "text" if primary.kind == "completions" else "content"
    for mine, theirs in zip(primary.choices, other.choices):
        diffs.extend(compare_choice(mine, theirs, text_name))
    if (primary.status, primary.incomplete_reason) != (other.status, other.incomplete_reason):
        diffs.append(FieldDiff("status", 0, "value", None,
                               f"status {_shown(primary)} vs {_shown(other)}"))
    return diffs


def compare_choice(primary: ChoiceAnswer, other: ChoiceAnswer,
                   text_name: str = "content") -> list[FieldDiff]:
    """The fields of one choice that differ; `text_name` names `content` as the client
    does (completions: `text`)."""
    index = primary.choice
    diffs: list[FieldDiff] = []
    for name in _TEXT_FIELDS:
        position = first_difference(getattr(primary, name), getattr(other, name))
        if position is not None:
            shown = text_name if name == "content" else name
            diffs.append(FieldDiff(shown, index, "text", position,
                                   f"{shown} differs at character {position}"))
    calls = compare_tool_calls(primary.tool_calls, other.tool_calls, index)
    if calls is not None:
        diffs.append(calls)
    for name in ("finish_reason", "stop_reason"):
        mine, theirs = getattr(primary, name), getattr(other, name)
        if mine != theirs:
            diffs.append(FieldDiff(name, index, "value", None, f"{name} {mine!r} vs {theirs!r}"))
    return diffs


def compare_tool_calls(primary: tuple[ToolCall, ...], other: tuple[ToolCall, ...],
                       choice: int = 0) -> FieldDiff | None:
    """The first difference between two lists of tool calls, or None."""
    if len(primary) != len(other):
        return FieldDiff("tool_calls", choice, "tool_calls", None,
                         f"{len(primary)} vs {len(other)} tool calls")
    for i, (mine, theirs) in enumerate(zip(primary, other)):
        if mine.name != theirs.name:
            return FieldDiff("tool_calls", choice, "tool_calls", None,
                             f"tool call {i}: function name differs")
        if arguments_equal(mine.arguments, theirs.arguments):
            continue
        position = first_difference(mine.arguments, theirs.arguments)
        return FieldDiff("tool_calls", choice, "tool_calls", position,
                         f"tool call {i}: arguments differ at character {position}")
    return None


def arguments_equal(a: str, b: str) -> bool:
    """Equal as JSON values when both parse, else as strings."""
    if a == b:
        return True
    ca, cb = canonical_json(a), canonical_json(b)
    if ca is None or cb is None:
        return False
    return ca == cb


def canonical_json(text: str) -> str | None:
    """`text` as canonical JSON (sorted keys, no spaces), or None when it does not parse."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _shown(answer: Answer) -> str:
    if answer.incomplete_reason:
        return f"{answer.status!r} ({answer.incomplete_reason})"
    return repr(answer.status)
