"""Field-by-field comparison of answers, and their capture from vLLM-shaped streams/bodies."""

from __future__ import annotations

import json
from typing import Any

from proxy.capture.answer import Answer, ChoiceAnswer, ToolCall
from proxy.capture.builder import CaptureBuilder
from proxy.capture.types import Capture, RequestMeta
from proxy.compare.diff import compare
from proxy.compare.fields import arguments_equal, compare_answers, compare_tool_calls


def _sse(*events: dict[str, Any], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def _capture(role: Any, payload: bytes, stream: bool = True) -> Capture:
    builder = CaptureBuilder(role, role, 0.0, stream=stream)
    if stream:
        for i, line in enumerate(payload.split(b"\n\n")):
            if line:
                builder.on_chunk(line + b"\n\n", 0.01 * (i + 1))
    else:
        builder.on_body(payload, 0.5)
    return builder.finish(200, 1.0)


def _chat_tool_stream(arguments: list[str], name: str = "get_weather") -> bytes:
    head = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    first = {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_x", "type": "function",
         "function": {"name": name, "arguments": ""}}]}}]}
    pieces = [{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": a}}]}}]} for a in arguments]
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return _sse(head, first, *pieces, end)


META = RequestMeta("chat", True, True, "0" * 64, 10, 16)


def test_tool_call_assembled_from_deltas_per_index() -> None:
    cap = _capture("primary", _chat_tool_stream(['{"city": ', '"Paris"}']))
    assert cap.answer is not None
    (choice,) = cap.answer.choices
    assert choice.tool_calls == (ToolCall("get_weather", '{"city": "Paris"}'),)
    assert choice.finish_reason == "tool_calls"
    assert cap.text == "" and cap.ttft_s is not None


def test_only_tool_arguments_differ_is_a_divergence_on_tool_calls() -> None:
    primary = _capture("primary", _chat_tool_stream(['{"city": ', '"Paris"}']))
    shadow = _capture("shadow", _chat_tool_stream(['{"city": ', '"Lyon"}']))
    result = compare(primary, shadow, META, "shadow")
    assert result.outcome == "diverged"
    assert (result.field, result.basis, result.choice) == ("tool_calls", "tool_calls", 0)
    assert "arguments differ at character 10" in result.reason  # {"city": "|P
    assert "Paris" not in result.reason and "Lyon" not in result.reason  # no text kept


def test_same_arguments_other_whitespace_and_call_id_match() -> None:
    primary = _capture("primary", _chat_tool_stream(['{"city": "Paris"}']))
    shadow = _capture("shadow", _chat_tool_stream(['{"city":"Paris"}']))
    assert compare(primary, shadow, META, "shadow").outcome == "match"


def test_arguments_compared_as_json_values_strictly() -> None:
    assert arguments_equal('{"a": 1, "b": 2}', '{"b":2,"a":1}')
    assert not arguments_equal('{"a": 1}', '{"a": 1.0}')
    assert not arguments_equal('{"a": true}', '{"a": 1}')
    assert not arguments_equal('{"a": 1', '{"a": 1 ')  # neither parses: strings
    diff = compare_tool_calls((ToolCall("f", "{bad"),), (ToolCall("f", "{baX"),))
    assert diff is not None and diff.position == 3
    diff = compare_tool_calls((ToolCall("f", "{}"),), (ToolCall("g", "{}"),))
    assert diff is not None and "name" in diff.detail


def test_reasoning_only_differs_and_is_read_before_content() -> None:
    def stream(reasoning: str, key: str) -> bytes:
        return _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                    {"choices": [{"index": 0, "delta": {key: reasoning}}]},
                    {"choices": [{"index": 0, "delta": {"content": "42"}}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    primary = _capture("primary", stream("think a", "reasoning_content"))
    shadow = _capture("shadow", stream("think b", "reasoning"))
    result = compare(primary, shadow, META, "shadow")
    assert (result.outcome, result.field, result.basis) == ("diverged", "reasoning", "text")
    same = _capture("shadow", stream("think a", "reasoning"))
    assert compare(primary, same, META, "shadow").outcome == "match"


def test_every_choice_of_n_is_compared() -> None:
    def stream(second: str) -> bytes:
        return _sse(*({"choices": [{"index": i, "text": t}]}
                      for i, t in ((0, "same"), (1, second), (0, "!"), (1, "!"))),
                    {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
                    {"choices": [{"index": 1, "text": "", "finish_reason": "length"}]})
    meta = RequestMeta("completions", True, True, "0" * 64, 10, 16, n=2)
    primary, shadow = _capture("primary", stream("one")), _capture("shadow", stream("two"))
    assert primary.answer is not None and len(primary.answer.choices) == 2
    result = compare(primary, shadow, meta, "shadow")
    assert (result.outcome, result.field, result.choice) == ("diverged", "text", 1)
    assert compare(primary, _capture("shadow", stream("one")), meta, "shadow").outcome == "match"


def test_unstreamed_chat_with_tool_calls_and_n() -> None:
    def body(city: str) -> bytes:
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "chatcmpl-tool-1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}
        return json.dumps({"choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls"},
            {"index": 1, "message": {"role": "assistant", "content": "hi"},
             "finish_reason": "stop"}],
            "usage": {"completion_tokens": 9}}).encode()
    primary = _capture("primary", body("Paris"), stream=False)
    assert primary.answer is not None
    assert primary.answer.choices[0].tool_calls[0].name == "get_weather"
    assert primary.answer.choices[1].content == "hi"
    meta = RequestMeta("chat", False, True, "0" * 64, 10, 16, n=2)
    result = compare(primary, _capture("shadow", body("Rome"), stream=False), meta, "shadow")
    assert (result.outcome, result.field) == ("diverged", "tool_calls")


def _response(text: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"object": "response", "status": status,
            "incomplete_details": None if status == "completed" else {"reason": "max_output_tokens"},
            "output": [
                {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm"}]},
                {"type": "message", "content": [{"type": "output_text", "text": text}]},
                {"type": "function_call", "call_id": "x", "name": "f", "arguments": arguments}],
            "usage": {"output_tokens": 7}}


def test_responses_api_streamed_and_not() -> None:
    def stream(text: str, arguments: str) -> bytes:
        return _sse({"type": "response.created", "response": {"status": "in_progress"}},
                    {"type": "response.reasoning_text.delta", "delta": "hmm"},
                    {"type": "response.output_text.delta", "delta": text},
                    {"type": "response.function_call_arguments.delta", "delta": arguments},
                    {"type": "response.completed", "response": _response(text, arguments)},
                    done=False)
    meta = RequestMeta("responses", True, True, "0" * 64, 10, 16)
    primary = _capture("primary", stream("hello", '{"x": 1}'))
    assert primary.error is None and primary.text == "hello" and primary.output_tokens == 7
    assert primary.ttft_s == 0.02 and len(primary.itl_s) == 2  # the three output deltas
    assert compare(primary, _capture("shadow", stream("hello", '{"x":1}')), meta,
                   "shadow").outcome == "match"
    result = compare(primary, _capture("shadow", stream("hello", '{"x": 2}')), meta, "shadow")
    assert (result.field, result.basis) == ("tool_calls", "tool_calls")
    body = json.dumps(_response("hello", "{}", "incomplete")).encode()
    unstreamed = _capture("primary", body, stream=False)
    assert unstreamed.answer is not None
    assert unstreamed.answer.incomplete_reason == "max_output_tokens"
    other = _capture("shadow", json.dumps(_response("hello", "{}")).encode(), stream=False)
    result = compare(unstreamed, other, RequestMeta("responses", False, True, "0" * 64, 1, 1),
                     "shadow")
    assert (result.outcome, result.field) == ("diverged", "status")
    cut = _capture("shadow", stream("hello", "{}").rsplit(b"data: ", 1)[0])
    assert cut.error == "truncated"  # no terminal event


def test_choice_count_and_refusal() -> None:
    one = Answer("chat", (ChoiceAnswer(0, "a"),))
    two = Answer("chat", (ChoiceAnswer(0, "a"), ChoiceAnswer(1, "b")))
    assert [d.field for d in compare_answers(one, two)] == ["choices"]
    refused = Answer("chat", (ChoiceAnswer(0, "", refusal="no"),))
    assert [d.field for d in compare_answers(Answer("chat", (ChoiceAnswer(0, ""),)),
                                             refused)] == ["refusal"]


def test_answer_json_round_trip_keeps_every_field() -> None:
    from proxy.capture.answer import answer_from_json, answer_json

    answer = Answer("chat", (ChoiceAnswer(0, "", "why", "", (ToolCall("f", '{"a": 1}'),),
                                          "tool_calls", None),
                             ChoiceAnswer(1, "hi", finish_reason="stop", stop_reason="42")))
    back = answer_from_json(json.loads(json.dumps(answer_json(answer))))
    assert back == answer and compare_answers(answer, back) == []
    assert answer_from_json(None) is None


def test_a_delta_with_reasoning_and_content_at_once_keeps_both() -> None:
    # vLLM's reasoning parser can end the reasoning and start the content in one delta.
    events = _sse({"choices": [{"index": 0, "delta": {"reasoning": "think"}}]},
                  {"choices": [{"index": 0, "delta": {"reasoning": ".", "content": "An"}}]},
                  {"choices": [{"index": 0, "delta": {"content": "swer"},
                                "finish_reason": "stop"}]})
    cap = _capture("primary", events)
    assert cap.answer is not None and cap.text == "Answer"
    assert (cap.answer.choices[0].reasoning, cap.answer.choices[0].content) == ("think.",
                                                                                "Answer")
