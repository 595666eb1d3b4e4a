"""The generation endpoints (/v1/completions, /v1/chat/completions): timing and faults.

A stream follows an absolute timeline (TTFT, then one ITL per step) so delays
do not drift; faults are drawn per request from the app's seeded PRNG.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from proxy.sim.agentic import generations, structured_chat
from proxy.sim.render import DONE, ChunkEncoder, full_response
from proxy.sim.request import Endpoint, RequestError, SamplingSpec
from proxy.sim.state import (
    SIM_STATE,
    Fault,
    SimState,
    error_response,
    json_response,
    read_spec,
)
from proxy.sim.structured import parse_extras
from proxy.sim.tokens import Generation

# With no inter-token delay, events are written in batches of this many bytes.
_BATCH_BYTES = 16384
GARBAGE_EVENT = b'data: {"id":"cmpl-garbage","choices":[{"text":\n\nevent\xff\xfe: \x00broken\n\n'


@dataclass(frozen=True)
class _Job:
    """One accepted generation request, ready to be answered."""

    state: SimState
    spec: SamplingSpec
    gens: Sequence[Generation]
    request_id: str
    fault: Fault | None


def _abort_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _generation(request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    config = state.config
    parsed = await read_spec(request, endpoint)
    if isinstance(parsed, web.Response):
        return parsed
    body, spec = parsed
    fault = state.draw_fault()
    if fault == "error":
        state.stats.injected["error"] += 1
        return error_response(
            500, "simulated engine failure (injected by --error-rate)", "InternalServerError"
        )
    gens = generations(state, spec)
    prefix = "chatcmpl-" if endpoint == "chat" else "cmpl-"
    request_id = prefix + uuid.uuid4().hex
    if endpoint == "chat":  # tools, response_format, --reasoning: proxy.sim.agentic
        try:
            extras = parse_extras(body, config.reasoning)
        except RequestError as exc:
            return error_response(exc.status, exc.message, exc.error_type, exc.param)
        if not extras.plain:
            return await structured_chat(request, state, spec, extras, gens, request_id)
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
    delay = state.ttft_delay_s()
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
    return json_response(
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
    paced = config.itl_ms > 0
    pending = bytearray()
    due = started + state.ttft_delay_s()
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
        # Paced streams send every step as it is due (a client measures each gap); an
        # unpaced one sends its first event at once, then batches (benchmark backend).
        flush = paced or step == 0 or len(pending) >= _BATCH_BYTES
        if flush and step != steps - 1:
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


def generation_handler(
    endpoint: Endpoint,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _generation(request, endpoint)

    return handle
