"""vLLM-shaped bodies of structured answers: chat with reasoning / tool calls, and the
Responses API, streamed (events) and not (one object). Pure: values in, bytes/dicts out.

Chat streams follow vLLM 0.32 with a reasoning parser and a tool parser: the role chunk,
`reasoning` deltas, `content` deltas, then per call a delta with its id, name and empty
arguments followed by argument pieces, then the finish reason. Responses-API streams
send `response.created`, per output item `response.output_item.added`, its deltas
(`response.reasoning_text.delta`, `response.output_text.delta`,
`response.function_call_arguments.delta`) and `response.output_item.done`, then
`response.completed` (or `response.incomplete`) with the whole response; no `[DONE]`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.sim.structured import Structured, pieces


def _event(obj: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


def chat_events(head: dict[str, Any], index: int, answer: Structured) -> list[bytes]:
    """One choice's chat chunks; `head` holds id, object, created, model."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _event({**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                             "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if answer.reasoning:
        out += [chunk({"reasoning": p}) for p in pieces(answer.reasoning)]
    if answer.content:
        out += [chunk({"content": p}) for p in pieces(answer.content)]
    for number, (name, arguments) in enumerate(answer.calls):
        out.append(chunk({"tool_calls": [{"index": number, "id": f"chatcmpl-tool-{number}",
                                          "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": number, "function": {"arguments": p}}]})
                for p in pieces(arguments)]
    out.append(chunk({}, answer.finish_reason))
    return out


def chat_message(answer: Structured) -> dict[str, Any]:
    calls = [{"id": f"chatcmpl-tool-{i}", "type": "function",
              "function": {"name": name, "arguments": arguments}}
             for i, (name, arguments) in enumerate(answer.calls)]
    return {"role": "assistant", "content": answer.content if not calls else None,
            "refusal": None, "tool_calls": calls,
            "reasoning": answer.reasoning or None}


def _output_items(answer: Structured, request_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if answer.reasoning:
        items.append({"id": f"rs_{request_id}", "type": "reasoning", "summary": [],
                      "content": [{"type": "reasoning_text", "text": answer.reasoning}]})
    if answer.content or not answer.calls:
        items.append({"id": f"msg_{request_id}", "type": "message", "role": "assistant",
                      "status": "completed", "content": [
                          {"type": "output_text", "text": answer.content, "annotations": []}]})
    items += [{"id": f"fc_{request_id}_{i}", "type": "function_call", "call_id": f"call_{i}",
               "name": name, "arguments": arguments, "status": "completed"}
              for i, (name, arguments) in enumerate(answer.calls)]
    return items


def responses_body(request_id: str, model: str, answer: Structured, input_tokens: int,
                   output_tokens: int) -> dict[str, Any]:
    incomplete = answer.finish_reason == "length"
    return {
        "id": request_id, "object": "response", "created_at": int(time.time()),
        "model": model, "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": _output_items(answer, request_id),
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens},
    }


def responses_events(body: dict[str, Any]) -> list[bytes]:
    """The stream of the finished response `body`, event by event."""
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> bytes:
        return _event({"type": kind, "sequence_number": next(seq), **fields}, kind)

    started = {**body, "status": "in_progress", "output": [], "usage": None}
    out = [event("response.created", response=started)]
    for number, item in enumerate(body["output"]):
        out.append(event("response.output_item.added", output_index=number,
                         item={**item, "status": "in_progress"}))
        kind = item["type"]
        if kind == "function_call":
            out += [event("response.function_call_arguments.delta", output_index=number,
                          item_id=item["id"], delta=p) for p in pieces(item["arguments"])]
        else:
            delta = "response.reasoning_text.delta" if kind == "reasoning" \
                else "response.output_text.delta"
            text = item["content"][0]["text"]
            out += [event(delta, output_index=number, item_id=item["id"], content_index=0,
                          delta=p) for p in pieces(text) if p]
        out.append(event("response.output_item.done", output_index=number, item=item))
    ending = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    out.append(event(ending, response=body))
    return out
