"""A golden answer keeps every field (with --store-text), so `eval compare` compares the
tool calls, reasoning and every choice as the live proxy does."""

from __future__ import annotations

import json

from proxy.compare.answer import Answer, ChoiceAnswer, ToolCall
from proxy.compare.diff import compare
from proxy.compare.types import Capture, RequestMeta
from proxy.evaluate.golden import capture_from_json, capture_json


def _capture(arguments: str) -> Capture:
    answer = Answer("chat", (ChoiceAnswer(0, "", "", "", (ToolCall("f", arguments),),
                                          "tool_calls"),))
    return Capture("primary", "old", 200, 0.1, (), 0.2, 5, "tool_calls", "", None,
                   answer=answer)


def test_golden_answer_keeps_fields_only_with_text() -> None:
    stored = json.loads(json.dumps(capture_json(_capture('{"q": "a"}'), store_text=True)))
    golden = capture_from_json(stored, "primary", "golden")
    meta = RequestMeta("chat", True, True, "0" * 64, 1, 8)
    live = _capture('{"q": "b"}')
    result = compare(golden, live, meta, "shadow")
    assert (result.outcome, result.field) == ("diverged", "tool_calls")
    assert compare(golden, _capture('{"q":"a"}'), meta, "shadow").outcome == "match"
    bare = capture_from_json(json.loads(json.dumps(capture_json(_capture("{}"), False))),
                             "primary", "golden")
    assert bare.answer is None  # no text kept: token ids and finish reason only, as before
