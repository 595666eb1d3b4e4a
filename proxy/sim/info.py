"""The simulator's informational endpoints: health, version, models, tokenizer, metrics."""

from __future__ import annotations

import json

from aiohttp import web

from proxy.sim.metrics import render_metrics
from proxy.sim.request import RequestError, chat_prompt, tokenizable
from proxy.sim.state import SIM_STATE, error_response, json_response


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return json_response({"version": request.app[SIM_STATE].config.version})


async def models(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    name = state.config.model_name
    return json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(state.started_unix),
                    "owned_by": "vllm",
                    "root": name,
                    "parent": None,
                    "max_model_len": state.config.max_model_len,
                }
            ],
        }
    )


async def tokenize(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    try:
        body = json.loads(await request.read())
        if not isinstance(body, dict):
            raise RequestError(400, "request body must be a JSON object")
        if "messages" in body:
            text = tokenizable(chat_prompt(body["messages"]))
        elif isinstance(body.get("prompt"), str):
            text = tokenizable(body["prompt"])
        else:
            raise RequestError(400, "tokenize needs a string prompt or messages", "prompt")
    except json.JSONDecodeError as exc:
        return error_response(400, f"Invalid JSON body: {exc}", "BadRequestError")
    except RequestError as exc:
        return error_response(exc.status, exc.message, exc.error_type, exc.param)
    tokens = state.vocab.tokenize(text)
    return json_response(
        {
            "count": len(tokens),
            "max_model_len": state.config.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }
    )


async def detokenize(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    try:
        body = json.loads(await request.read())
        tokens = body["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ValueError(f"tokens must be a list of integers, got {tokens!r}")
        text = state.vocab.detokenize(tokens)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return error_response(400, f"detokenize: {exc}", "BadRequestError", "tokens")
    return json_response({"prompt": text})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    text = render_metrics(state.stats, state.config.model_name)
    return web.Response(text=text, content_type="text/plain", charset="utf-8")
