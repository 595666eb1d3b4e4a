"""Steady client load that checks every answer in full: the demo's traffic during a cutover,
and the load the cutover's end-to-end tests and benchmark run under.

Each client loops until told to stop, alternating chat and completions, streamed and not.
Every request asks for exactly `max_tokens` tokens (`ignore_eos`), so an answer is complete
only when it has that many tokens, finish reason "length" and, streamed, ends with
`data: [DONE]`. Anything else is a failure with its kind: an HTTP status, a connection
error, a stream cut short.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["chat", "completions"]
DONE_LINE = b"data: [DONE]"


@dataclass(frozen=True)
class Outcome:
    """One request as the client saw it."""

    kind: Kind
    stream: bool
    started_s: float  # perf_counter at send
    ttft_s: float | None  # first body byte
    e2e_s: float
    status: int | None
    tokens: int | None
    error: str | None  # None: complete and correct
    fingerprint: str | None = None  # system_fingerprint of an unstreamed answer

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class SteadyResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> dict[str, Any]:
        errors = Counter(o.error for o in self.outcomes if o.error)
        return {"requests": len(self.outcomes), "failed": sum(errors.values()),
                "errors": dict(errors),
                "streams": sum(1 for o in self.outcomes if o.stream)}


def _body(kind: Kind, stream: bool, model: str, max_tokens: int, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True, "stream": stream}
    prompt = f"Steady request {n}: tell a long story about the number {n % 97}."
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def check_stream(raw: bytes, max_tokens: int) -> tuple[int | None, str | None]:
    """(completion tokens, error) of a streamed answer: complete means [DONE] last, usage
    saying `max_tokens` tokens and finish reason "length"."""
    events = [line for line in raw.split(b"\n") if line.startswith(b"data: ")]
    if not events or events[-1].strip() != DONE_LINE:
        return None, "stream_without_done"
    tokens: int | None = None
    finish = None
    for line in events[:-1]:
        try:
            chunk = json.loads(line[6:])
        except ValueError:
            return None, "bad_event"
        if not isinstance(chunk, dict):
            return None, "bad_event"
        for choice in chunk.get("choices") or ():
            finish = choice.get("finish_reason") or finish
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            tokens = int(usage["completion_tokens"])
    if tokens != max_tokens or finish != "length":
        return tokens, "stream_short"
    return tokens, None


def check_full(raw: bytes, max_tokens: int) -> tuple[int | None, str | None, str | None]:
    """(tokens, error, system_fingerprint) of an unstreamed answer."""
    try:
        body = json.loads(raw)
        tokens = int(body["usage"]["completion_tokens"])
        finish = body["choices"][0]["finish_reason"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, "bad_body", None
    fingerprint = body.get("system_fingerprint")
    if tokens != max_tokens or finish != "length":
        return tokens, "answer_short", fingerprint
    return tokens, None, fingerprint


class SteadyLoad:
    """`clients` concurrent loops against `base_url` until `stop` is set."""

    def __init__(self, base_url: str, model: str, clients: int = 32, max_tokens: int = 24,
                 timeout_s: float = 120.0, pause_s: float = 0.0,
                 stream: bool | None = None, limit: int | None = None) -> None:
        if clients < 1 or max_tokens < 1:
            raise ValueError(f"clients and max_tokens must be >= 1, got {clients!r}, "
                             f"{max_tokens!r}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 requests, got {limit!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.clients = clients
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.pause_s = pause_s
        self.stream = stream  # None: three in four requests streamed; else all or none
        self.limit = limit  # requests to send in all (None: until `stop`)
        self.result = SteadyResult()
        self._count = 0

    async def run(self, stop: asyncio.Event) -> SteadyResult:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        connector = aiohttp.TCPConnector(limit=self.clients)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(*(self._client(session, i, stop) for i in range(self.clients)))
        return self.result

    async def _client(self, session: Any, index: int, stop: asyncio.Event) -> None:
        turn = index
        while not stop.is_set() and (self.limit is None or self._count < self.limit):
            kind: Kind = "chat" if turn % 2 else "completions"
            stream = turn % 4 != 3 if self.stream is None else self.stream
            self.result.outcomes.append(await self.one(session, kind, stream))
            turn += 1
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    async def one(self, session: Any, kind: Kind, stream: bool) -> Outcome:
        import aiohttp

        self._count += 1
        path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        body = _body(kind, stream, self.model, self.max_tokens, self._count)
        started = time.perf_counter()
        ttft = None
        status = None
        try:
            async with session.post(self.base_url + path, json=body) as resp:
                status = resp.status
                chunks = []
                async for piece in resp.content.iter_any():
                    if ttft is None:
                        ttft = time.perf_counter() - started
                    chunks.append(piece)
            raw = b"".join(chunks)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return Outcome(kind, stream, started, ttft, time.perf_counter() - started, status,
                           None, f"client_{type(exc).__name__}")
        e2e = time.perf_counter() - started
        if status != 200:
            return Outcome(kind, stream, started, ttft, e2e, status, None, f"http_{status}")
        fingerprint = None
        if stream:
            tokens, error = check_stream(raw, self.max_tokens)
        else:
            tokens, error, fingerprint = check_full(raw, self.max_tokens)
        return Outcome(kind, stream, started, ttft, e2e, status, tokens, error, fingerprint)
