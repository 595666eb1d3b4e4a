"""The simulated vLLM OpenAI-compatible server: aiohttp app factory and handlers.

`make_sim_app(config)` is all a test or the demo needs; `vllm-cutover sim`
only builds the config and runs it. Faults (500s, resets, invalid SSE) are
drawn per request from the app's own seeded PRNG, so a run is reproducible.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from proxy.sim.config import SimConfig
from proxy.sim.generate import Generation, generate
from proxy.sim.metrics import SimStats, render_metrics
from proxy.sim.render import DONE, ChunkEncoder, error_body, full_response
from proxy.sim.request import Endpoint, RequestError, SamplingSpec, parse_request
from proxy.sim.vocab import Vocab, build_vocab

log = logging.getLogger(__name__)

Fault = Literal["error", "reset", "garbage"]
# With no inter-token delay, events are written in batches of this many bytes.
_BATCH_BYTES = 16384
GARBAGE_EVENT = b'data: {"id":"cmpl-garbage","choices":[{"text":\n\nevent\xff\xfe: \x00broken\n\n'


@dataclass
class SimState:
    """Per-app mutable state: the fault/sampling PRNG and counters."""

    config: SimConfig
    vocab: Vocab
    rng: random.Random
    stats: SimStats = field(default_factory=SimStats)
    started_unix: float = field(default_factory=time.time)

    def draw_fault(self) -> Fault | None:
        # Always three draws, so the sequence does not depend on which rates are zero.
        err, reset, garbage = self.rng.random(), self.rng.random(), self.rng.random()
        if err < self.config.error_rate:
            return "error"
        if reset < self.config.reset_rate:
            return "reset"
        if garbage < self.config.garbage_rate:
            return "garbage"
        return None

    def delay_s(self, ms: float) -> float:
        if ms <= 0:
            return 0.0
        jitter = self.config.jitter
        factor = self.rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0
        return ms * factor / 1000.0


SIM_STATE = web.AppKey("sim_state", SimState)


@dataclass(frozen=True)
class _Job:
    """One accepted generation request, ready to be answered."""

    state: SimState
    spec: SamplingSpec
    gens: Sequence[Generation]
    request_id: str
    fault: Fault | None


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
    )


def _error(status: int, message: str, error_type: str, param: str | None = None) -> web.Response:
    return _json(error_body(status, message, error_type, param), status)


def _abort_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _generation(request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    config = state.config
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _error(400, f"Invalid JSON body: {exc}", "BadRequestError")
    try:
        spec = parse_request(endpoint, body, state.vocab, config.max_model_len)
    except RequestError as exc:
        return _error(exc.status, exc.message, exc.error_type, exc.param)
    if spec.model is not None and spec.model != config.model_name:
        return _error(404, f"The model `{spec.model}` does not exist.", "NotFoundError", "model")
    fault = state.draw_fault()
    if fault == "error":
        state.stats.injected["error"] += 1
        return _error(
            500, "simulated engine failure (injected by --error-rate)", "InternalServerError"
        )
    nonce = state.rng.getrandbits(64)
    gens = [generate(state.vocab, config, spec, i, nonce) for i in range(spec.n)]
    state.stats.injected["divergence"] += sum(g.diverged_at is not None for g in gens)
    prefix = "chatcmpl-" if endpoint == "chat" else "cmpl-"
    request_id = prefix + uuid.uuid4().hex
    state.stats.running += 1
    state.stats.prompt_tokens += len(spec.prompt_ids)
    started = time.perf_counter()
    finished = False
    try:
        job = _Job(state, spec, gens, request_id, fault)
        response = await (_stream if spec.stream else _complete)(request, job)
        finished = fault is None
        return response
    finally:
        state.stats.running -= 1
        if finished:
            state.stats.e2e.observe(time.perf_counter() - started)
            state.stats.generation_tokens += sum(len(g.token_ids) for g in gens)
            for gen in gens:
                state.stats.success[gen.finish_reason] += 1
        else:
            state.stats.success["abort"] += 1


async def _complete(request: web.Request, job: _Job) -> web.StreamResponse:
    state, spec, gens, fault = job.state, job.spec, job.gens, job.fault
    longest = max(len(g.token_ids) for g in gens)
    delay = state.delay_s(state.config.ttft_ms)
    delay += sum(state.delay_s(state.config.itl_ms) for _ in range(max(0, longest - 1)))
    if delay:
        await asyncio.sleep(delay)
    state.stats.ttft.observe(delay)
    if fault == "reset":
        state.stats.injected["reset"] += 1
        _abort_connection(request)
        return web.Response(status=500)
    if fault == "garbage":
        state.stats.injected["garbage"] += 1
        return web.Response(
            body=b'{"id": "cmpl-garbage", "choices": [{"te', content_type="application/json"
        )
    fingerprint = f"vllm-{state.config.version}"
    return _json(
        full_response(state.vocab, spec, gens, job.request_id, state.config.model_name, fingerprint)
    )


def _chunk_bounds(length: int, per_chunk: int) -> list[tuple[int, int]]:
    if length == 0:
        return [(0, 0)]
    return [(s, min(s + per_chunk, length)) for s in range(0, length, per_chunk)]


async def _stream(request: web.Request, job: _Job) -> web.StreamResponse:
    state, spec, gens, fault = job.state, job.spec, job.gens, job.fault
    config = state.config
    encoder = ChunkEncoder(state.vocab, spec, job.request_id, config.model_name)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    started = loop.time()
    bounds = [_chunk_bounds(len(g.token_ids), config.tokens_per_chunk) for g in gens]
    steps = max(len(b) for b in bounds)
    cut_at = max(1, steps // 2) if fault else steps + 1
    offsets = [0] * len(gens)
    pending = bytearray()
    due = started + state.delay_s(config.ttft_ms)
    for step in range(steps):
        if step == cut_at:
            if fault == "reset":
                state.stats.injected["reset"] += 1
                await response.write(bytes(pending))
                _abort_connection(request)
                return response
            state.stats.injected["garbage"] += 1
            pending += GARBAGE_EVENT
        wait = due - loop.time()
        if wait > 0 or (step <= 1 and pending):
            if pending:
                await response.write(bytes(pending))
                pending.clear()
            if wait > 0:
                await asyncio.sleep(wait)
        if step == 0:
            state.stats.ttft.observe(loop.time() - started)
        for index, gen in enumerate(gens):
            if step >= len(bounds[index]):
                continue
            if step == 0 and spec.endpoint == "chat":
                pending += encoder.role_chunk(index)
            start, stop = bounds[index][step]
            last = step == len(bounds[index]) - 1
            pending += encoder.token_chunk(index, gen, start, stop, offsets[index], last)
            if spec.logprobs is not None and spec.endpoint == "completions":
                offsets[index] += len(state.vocab.text_of(gen.token_ids[start:stop]))
        if len(pending) >= _BATCH_BYTES:
            await response.write(bytes(pending))
            pending.clear()
        itl = state.delay_s(config.itl_ms)
        if itl:
            state.stats.itl.observe(itl)
        due += itl
    if spec.include_usage:
        pending += encoder.usage_chunk(gens)
    pending += DONE
    await response.write(bytes(pending))
    await response.write_eof()
    return response


def _handler(endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _generation(request, endpoint)

    return handle


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _version(request: web.Request) -> web.Response:
    return _json({"version": request.app[SIM_STATE].config.version})


async def _models(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    name = state.config.model_name
    return _json(
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


async def _tokenize(request: web.Request) -> web.Response:
    from proxy.sim.request import chat_prompt

    state = request.app[SIM_STATE]
    try:
        body = json.loads(await request.read())
        if not isinstance(body, dict):
            raise RequestError(400, "request body must be a JSON object")
        if "messages" in body:
            text = chat_prompt(body["messages"])
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise RequestError(400, "tokenize needs a string prompt or messages", "prompt")
    except json.JSONDecodeError as exc:
        return _error(400, f"Invalid JSON body: {exc}", "BadRequestError")
    except RequestError as exc:
        return _error(exc.status, exc.message, exc.error_type, exc.param)
    tokens = state.vocab.tokenize(text)
    return _json(
        {
            "count": len(tokens),
            "max_model_len": state.config.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }
    )


async def _detokenize(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    try:
        body = json.loads(await request.read())
        tokens = body["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ValueError(f"tokens must be a list of integers, got {tokens!r}")
        text = state.vocab.detokenize(tokens)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return _error(400, f"detokenize: {exc}", "BadRequestError", "tokens")
    return _json({"prompt": text})


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    text = render_metrics(state.stats, state.config.model_name)
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


def make_sim_app(config: SimConfig | None = None) -> web.Application:
    """A fresh simulator app (its own PRNG and counters)."""
    config = config or SimConfig()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SIM_STATE] = SimState(config=config, vocab=build_vocab(), rng=random.Random(config.seed))
    app.router.add_post("/v1/completions", _handler("completions"))
    app.router.add_post("/v1/chat/completions", _handler("chat"))
    app.router.add_get("/health", _health)
    app.router.add_get("/ping", _health)
    app.router.add_post("/ping", _health)
    app.router.add_get("/version", _version)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_post("/detokenize", _detokenize)
    app.router.add_get("/metrics", _metrics)
    return app
