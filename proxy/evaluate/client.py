"""Send the eval's requests to one engine over HTTP and capture the answers (aiohttp).

Answers are captured by the proxy's own `CaptureBuilder`, so the eval times and parses a
stream exactly as the live shadow does. Failures of single requests become data
(`Capture.error`); an engine that cannot be reached at all is an `EngineUnreachable`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from proxy import boundedhttp
from proxy.capture.builder import CaptureBuilder
from proxy.capture.types import Capture, Role
from proxy.evaluate.jsonl import EngineUnreachable, EvalInputError
from proxy.evaluate.prompts import EvalRequest

ERROR_DETAIL_CHARS = 300


@dataclass(frozen=True)
class EngineInfo:
    """What an engine says about itself: `/version` and the served model names."""

    url: str
    version: str | None
    models: tuple[str, ...]

    @property
    def model(self) -> str | None:
        return self.models[0] if self.models else None


@dataclass(frozen=True)
class Answer:
    """One request's capture and, for an HTTP error, the start of the engine's message."""

    capture: Capture
    detail: str = ""
    started_s: float = 0.0  # since the replay began


def session(timeout_s: float, connections: int = 64) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        connector=aiohttp.TCPConnector(limit=connections),
    )


async def get_json(http: aiohttp.ClientSession, url: str) -> Any:
    """GET `url` as JSON; EvalInputError naming the URL when it cannot be reached or read,
    AnswerOverLimit past `boundedhttp.MAX_ANSWER_BYTES`."""
    try:
        async with http.get(url) as resp:
            if resp.status != 200:
                raise EngineUnreachable(f"GET {url} answered HTTP {resp.status}")
            raw = await read_bounded(resp, url)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise EngineUnreachable(f"cannot reach {url}: {exc or type(exc).__name__}") from None
    try:
        return boundedhttp.json_answer(raw, "GET " + url)
    except ValueError as exc:
        raise EngineUnreachable(str(exc)) from None


async def read_bounded(resp: aiohttp.ClientResponse, url: str,
                       max_bytes: int = boundedhttp.MAX_ANSWER_BYTES) -> bytes:
    """The whole body, or AnswerOverLimit once it passes `max_bytes` (the session's total
    timeout bounds its time)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > max_bytes:
            raise boundedhttp.over_size(url, max_bytes)
        parts.append(chunk)
    return b"".join(parts)


async def engine_info(http: aiohttp.ClientSession, url: str) -> EngineInfo:
    """The engine's version and served models (vLLM's `/version`, `/v1/models`)."""
    models = await get_json(http, url + "/v1/models")
    names: tuple[str, ...] = ()
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        names = tuple(str(m.get("id")) for m in models["data"] if isinstance(m, dict))
    try:
        version = await get_json(http, url + "/version")
    except EvalInputError:
        version = None  # not every OpenAI-compatible server has /version
    text = version.get("version") if isinstance(version, dict) else None
    return EngineInfo(url, str(text) if text is not None else None, names)


async def fetch(http: aiohttp.ClientSession, url: str, request: EvalRequest,
                role: Role) -> Answer:
    """POST one request and capture the answer as the mirror does."""
    stream = request.body.get("stream") is True
    t_start = time.perf_counter()
    builder = CaptureBuilder(role, url, t_start, stream=stream)
    status: int | None = None
    detail = ""
    try:
        async with http.post(url + request.path, json=request.body) as resp:
            status = resp.status
            if status >= 400:
                head = await resp.content.read(4 * ERROR_DETAIL_CHARS)
                detail = head.decode("utf-8", "replace")[:ERROR_DETAIL_CHARS]
            elif resp.content_type == "text/event-stream":
                size = 0
                async for chunk in resp.content.iter_any():
                    size += len(chunk)
                    if size > boundedhttp.MAX_ANSWER_BYTES:
                        raise boundedhttp.over_size(url + request.path,
                                                    boundedhttp.MAX_ANSWER_BYTES)
                    builder.on_chunk(chunk, time.perf_counter())
            else:
                body = await read_bounded(resp, url + request.path)
                builder.on_body(body, time.perf_counter())
    except asyncio.TimeoutError:
        return Answer(builder.finish(status, time.perf_counter(), error="timeout"))
    except (aiohttp.ClientError, OSError) as exc:
        return Answer(builder.finish(status, time.perf_counter(), error="connect"), str(exc))
    return Answer(builder.finish(status, time.perf_counter()), detail)


async def replay(url: str, requests: Sequence[EvalRequest], role: Role, *, concurrency: int,
                 rate: float = 0.0, offsets_s: Sequence[float] | None = None,
                 timeout_s: float = 300.0) -> list[Answer]:
    """Every request against `url`, at most `concurrency` at once, answers in request order.

    Starts are paced by `offsets_s` (a recorded schedule) or `rate` requests/s (0: as
    fast as the concurrency allows)."""
    slots = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter()

    async def one(i: int, request: EvalRequest) -> Answer:
        due = offsets_s[i] if offsets_s is not None else (i / rate if rate > 0 else 0.0)
        wait = t0 + due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        async with slots:
            started = time.perf_counter() - t0
            answer = await fetch(http, url, request, role)
        return replace(answer, started_s=started)

    async with session(timeout_s, max(concurrency, 1)) as http:
        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))
