"""Structured chat answers and the Responses API (`POST /v1/responses`) of the simulator.

Chat requests with tools, a JSON-schema `response_format`, or a simulator started with
`--reasoning` are answered here (plain chat and completions keep their hot path in
`proxy.sim.completions`); so are Responses-API requests, streamed or not. Events are
paced like the plain path: the first after `--ttft-ms`, then one per `--itl-ms`. Faults
(`--error-rate` ...) apply to the plain path only. `--diverge-field` picks what differs
on deterministic requests: `content` (every choice's tokens), `choice:N` (choice N's
tokens only), `tool_arguments` or `reasoning` (that part only).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web

from proxy.sim.config import SimConfig
from proxy.sim.parts_render import chat_events, chat_message, responses_body, responses_events
from proxy.sim.render import DONE
from proxy.sim.request import RequestError, SamplingSpec
from proxy.sim.state import SIM_STATE, SimState, error_response, json_response, read_spec
from proxy.sim.structured import Extras, Structured, parse_extras, structure
from proxy.sim.tokens import Generation, generate


def choice_config(config: SimConfig, index: int) -> SimConfig:
    """The config that generates choice `index`: forced to diverge where --diverge-field
    says its tokens differ."""
    field = config.diverge_field
    if field == "content" or field == f"choice:{index}":
        return replace(config, divergence_rate=1.0)
    return config


def generations(state: SimState, spec: SamplingSpec) -> list[Generation]:
    nonce = state.rng.getrandbits(64)
    gens = [generate(state.vocab, choice_config(state.config, i), spec, i, nonce)
            for i in range(spec.n)]
    state.stats.injected["divergence"] += sum(g.diverged_at is not None for g in gens)
    return gens


def answers(state: SimState, spec: SamplingSpec, extras: Extras,
            gens: Sequence[Generation]) -> list[Structured]:
    return [structure(state.vocab, extras, g, state.config.diverge_field, spec.deterministic)
            for g in gens]


def _output_tokens(state: SimState, answer: Structured) -> int:
    text = answer.reasoning + answer.content + "".join(a for _, a in answer.calls)
    return len(state.vocab.tokenize(text))


async def _paced(request: web.Request, state: SimState, events: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    due = loop.time() + state.delay_s(state.config.ttft_ms)
    for event in events:
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        await response.write(event)
        due += state.delay_s(state.config.itl_ms)
    await response.write_eof()
    return response


async def _wait_whole(state: SimState, events: int) -> None:
    delay = state.delay_s(state.config.ttft_ms)
    delay += sum(state.delay_s(state.config.itl_ms) for _ in range(max(0, events - 1)))
    if delay:
        await asyncio.sleep(delay)


async def structured_chat(request: web.Request, state: SimState, spec: SamplingSpec,
                          extras: Extras, gens: Sequence[Generation],
                          request_id: str) -> web.StreamResponse:
    parts = answers(state, spec, extras, gens)
    model = state.config.model_name
    head = {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}
    per_choice = [chat_events(head, i, a) for i, a in enumerate(parts)]
    completion = sum(_output_tokens(state, a) for a in parts)
    counts = {"prompt_tokens": len(spec.prompt_ids), "completion_tokens": completion,
              "total_tokens": len(spec.prompt_ids) + completion}
    if spec.stream:
        events = [e for choice in per_choice for e in choice]
        if spec.include_usage:
            events.append(b"data: " + json.dumps({**head, "choices": [], "usage": counts})
                          .encode() + b"\n\n")
        return await _paced(request, state, [*events, DONE])
    await _wait_whole(state, max(len(c) for c in per_choice))
    choices = [{"index": i, "message": chat_message(a), "logprobs": None,
                "finish_reason": a.finish_reason, "stop_reason": None}
               for i, a in enumerate(parts)]
    return json_response({"id": request_id, "object": "chat.completion",
                          "created": int(time.time()), "model": model, "choices": choices,
                          "usage": counts})


def _as_chat(body: Any) -> dict[str, Any]:
    """A Responses-API request as the chat request the simulator generates from."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    raw = body.get("input")
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list):
        for item in raw:
            if not isinstance(item, dict):
                raise RequestError(400, f"each input item must be an object, got {item!r}",
                                   "input")
            content = item.get("content", item.get("output", item.get("arguments", "")))
            messages.append({"role": item.get("role", item.get("type", "tool")),
                             "content": content if isinstance(content, (str, list)) else ""})
    else:
        raise RequestError(400, "input must be a string or a list of items", "input")
    chat: dict[str, Any] = {k: body[k] for k in ("model", "temperature", "seed", "top_p")
                            if k in body}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return {**chat, "messages": messages, "stream": bool(body.get("stream"))}


async def responses_handler(request: web.Request) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    config = state.config
    parsed = await read_spec(request, "chat", _as_chat)
    if isinstance(parsed, web.Response):
        return parsed
    body, spec = parsed
    try:
        extras = parse_extras(body, config.reasoning, responses=True)
    except RequestError as exc:
        return error_response(exc.status, exc.message, exc.error_type, exc.param)
    (answer,) = answers(state, spec, extras, generations(state, spec))
    request_id = "resp_" + uuid.uuid4().hex
    result = responses_body(request_id, config.model_name, answer, len(spec.prompt_ids),
                            _output_tokens(state, answer))
    events = responses_events(result)
    if spec.stream:
        return await _paced(request, state, events)
    await _wait_whole(state, len(events))
    return json_response(result)
