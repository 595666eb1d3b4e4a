"""The simulator's structured answers: tool calls, reasoning, JSON schema, the Responses API,
and a divergence injected into one field only."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig, SimConfigError

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "noop", "parameters": {}}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _chat(prompt: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": 12, **extra}


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            out.append(json.loads(data[0]))
    return out


def _assemble(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """choice -> reasoning, content, calls [name, arguments] (an independent reading)."""
    out: dict[int, dict[str, Any]] = {}
    for event in events:
        for choice in event.get("choices", []):
            slot = out.setdefault(choice["index"], {"reasoning": "", "content": "", "calls": {},
                                                    "finish": None})
            delta = choice["delta"]
            slot["reasoning"] += delta.get("reasoning") or ""
            slot["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                entry = slot["calls"].setdefault(call["index"], ["", ""])
                entry[0] += call.get("function", {}).get("name") or ""
                entry[1] += call.get("function", {}).get("arguments") or ""
            slot["finish"] = choice.get("finish_reason") or slot["finish"]
    return out


async def _post(client: Any, path: str, body: dict[str, Any]) -> Any:
    resp = await client.post(path, json=body)
    assert resp.status == 200, await resp.text()
    return _events(await resp.read()) if body.get("stream") else await resp.json()


@pytest.mark.parametrize("choice", ["named", "required", "auto"])
async def test_tool_calls_streamed_and_not_agree(aiohttp_client: Any, choice: str) -> None:
    client = await aiohttp_client(make_sim_app(SimConfig()))
    tool_choice = NAMED if choice == "named" else choice
    called = 0
    for i in range(8):
        body = _chat(f"weather {i}", tools=TOOLS, tool_choice=tool_choice)
        full = (await _post(client, "/v1/chat/completions", body))["choices"][0]
        streamed = _assemble(await _post(client, "/v1/chat/completions",
                                         {**body, "stream": True}))[0]
        calls = full["message"]["tool_calls"]
        assert [[c["function"]["name"], c["function"]["arguments"]] for c in calls] == \
            [streamed["calls"][k] for k in sorted(streamed["calls"])]
        assert streamed["finish"] == full["finish_reason"]
        if calls:
            called += 1
            assert calls[0]["function"]["name"] == "get_weather"
            args = json.loads(calls[0]["function"]["arguments"])
            assert set(args) == {"city", "days"} and isinstance(args["days"], int)
            assert full["message"]["content"] is None and streamed["content"] == ""
    assert called == 8 if choice != "auto" else 0 < called < 8


async def test_reasoning_then_content_and_json_schema(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_sim_app(SimConfig(reasoning=True)))
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "ok": {"type": "boolean"}}}
    body = _chat("x", response_format={"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": schema}})
    message = (await _post(client, "/v1/chat/completions", body))["choices"][0]["message"]
    assert message["reasoning"] and set(json.loads(message["content"])) == {"name", "ok"}
    events = await _post(client, "/v1/chat/completions", {**body, "stream": True})
    kinds = [k for e in events for c in e["choices"] for k in c["delta"] if k != "role"]
    assert kinds.index("reasoning") < len(kinds) - 1 - kinds[::-1].index("reasoning") \
        < kinds.index("content", 1)  # reasoning first, then the content
    assert _assemble(events)[0]["reasoning"] == message["reasoning"]


@pytest.mark.parametrize(("field", "differs"), [
    ("tool_arguments", "arguments"), ("reasoning", "reasoning"), ("content", "content"),
    ("choice:1", "choice1")])
async def test_diverge_field_changes_that_field_only(aiohttp_client: Any, field: str,
                                                     differs: str) -> None:
    old = await aiohttp_client(make_sim_app(SimConfig(reasoning=True)))
    new = await aiohttp_client(make_sim_app(SimConfig(reasoning=True, diverge_field=field)))
    seen: set[str] = set()
    for i in range(6):
        tools = {"tools": TOOLS, "tool_choice": NAMED} if field == "tool_arguments" else {}
        body = _chat(f"p{i}", n=2, max_tokens=40, **tools)
        a = (await _post(old, "/v1/chat/completions", body))["choices"]
        b = (await _post(new, "/v1/chat/completions", body))["choices"]
        for index, (x, y) in enumerate(zip(a, b)):
            mx, my = x["message"], y["message"]
            if mx["reasoning"] != my["reasoning"]:
                seen.add("reasoning")
            if mx["content"] != my["content"]:
                seen.add("content" if index == 0 else f"choice{index}")
            if mx["tool_calls"] != my["tool_calls"]:
                names = [c["function"]["name"] for c in mx["tool_calls"]]
                assert names == [c["function"]["name"] for c in my["tool_calls"]]
                seen.add("arguments")
    if field == "content":
        seen.discard("choice1")  # content: every choice's tokens
    assert seen == {differs}


async def test_responses_api_streamed_and_not(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_sim_app(SimConfig(reasoning=True)))
    tools = [{"type": "function", "name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}]
    body = {"input": "find it", "temperature": 0, "max_output_tokens": 30, "tools": tools,
            "tool_choice": "required"}
    full = await _post(client, "/v1/responses", body)
    assert full["object"] == "response" and full["status"] == "completed"
    kinds = [item["type"] for item in full["output"]]
    assert kinds == ["reasoning", "function_call"]
    events = await _post(client, "/v1/responses", {**body, "stream": True})
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    arguments = "".join(e["delta"] for e in events
                        if e["type"] == "response.function_call_arguments.delta")
    assert arguments == full["output"][1]["arguments"] == events[-1]["response"]["output"][1][
        "arguments"]
    text = await _post(client, "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "hi"}]}], "temperature": 0, "max_output_tokens": 5})
    assert text["status"] == "incomplete" and text["incomplete_details"] == {
        "reason": "max_output_tokens"}
    assert text["output"][-1]["content"][0]["text"]


async def test_bad_tool_choice_and_field_are_refused(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_sim_app(SimConfig()))
    resp = await client.post("/v1/chat/completions", json=_chat(
        "x", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert resp.status == 400 and "nope" in (await resp.json())["error"]["message"]
    with pytest.raises(SimConfigError, match="'tools'"):
        SimConfig(diverge_field="tools")
