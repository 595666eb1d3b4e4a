"""The demo's client traffic: a bounded, reproducible mix of OpenAI requests.

The mix covers both endpoints, streaming and not, deterministic (temperature 0
or seeded) and sampled requests, so every comparison path of the proxy runs.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_TOPICS = (
    "the upgrade plan",
    "kernel selection",
    "a quick brown fox",
    "the river and the cloud",
    "token latency",
    "a shadow server",
    "café prices in 東京",
    "streaming answers",
)


@dataclass(frozen=True)
class DemoRequest:
    """One request to send: path and JSON body."""

    path: str
    body: dict[str, Any]

    @property
    def deterministic(self) -> bool:
        return self.body.get("temperature") == 0 or "seed" in self.body


def demo_requests(count: int, model: str, seed: int = 0) -> list[DemoRequest]:
    """`count` requests: 2/3 deterministic (half of those with logprobs), half streamed, half chat."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        prompt = f"Request {i}: write about {rng.choice(_TOPICS)} (variant {rng.randrange(1000)})"
        body: dict[str, Any] = {"model": model, "max_tokens": rng.choice((16, 32, 48, 64))}
        kind = i % 3
        if kind == 0:
            body["temperature"] = 0
        elif kind == 1:
            body.update(temperature=0.7, seed=rng.randrange(1 << 30))
        else:
            body["temperature"] = 0.8
        chat = bool((i // 2) % 2)
        if kind != 2 and i % 4 < 2:
            # Logprobs let the proxy apply vLLM's closeness rule to divergences.
            body.update({"logprobs": True, "top_logprobs": 5} if chat else {"logprobs": 5})
        if i % 2:
            body["stream"] = True
            if i % 4 == 1:
                body["stream_options"] = {"include_usage": True}
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
            out.append(DemoRequest("/v1/chat/completions", body))
        else:
            body["prompt"] = prompt
            out.append(DemoRequest("/v1/completions", body))
    return out


@dataclass
class TrafficResult:
    """What the demo's clients saw."""

    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    ttft_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0


def answer_text(path: str, raw: bytes, stream: bool) -> str:
    """The generated text of choice 0, from a full or a streamed answer."""
    key = "message" if path.endswith("chat/completions") else "text"
    if not stream:
        choice = json.loads(raw)["choices"][0]
        return str(choice["message"]["content"] if key == "message" else choice["text"])
    parts = []
    for block in raw.decode().split("\n\n"):
        payload = block.removeprefix("data: ").strip()
        if not payload or payload == "[DONE]":
            continue
        for choice in json.loads(payload).get("choices") or ():
            parts.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(parts)


async def fetch(session: Any, base_url: str, request: DemoRequest) -> tuple[int, bytes, float]:
    """(status, body, time to first body byte) of one request."""
    started = time.perf_counter()
    async with session.post(base_url + request.path, json=request.body) as resp:
        first = await resp.content.readany()
        ttft = time.perf_counter() - started
        rest = await resp.read()
        return resp.status, first + rest, ttft


async def send_all(
    base_url: str, requests: list[DemoRequest], concurrency: int, timeout_s: float = 30.0
) -> TrafficResult:
    """Send every request with at most `concurrency` in flight."""
    import aiohttp

    result = TrafficResult()
    queue: asyncio.Queue[DemoRequest] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            while not queue.empty():
                request = queue.get_nowait()
                result.sent += 1
                try:
                    status, _, ttft = await fetch(session, base_url, request)
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    result.failures[type(exc).__name__] += 1
                    continue
                result.statuses[status] += 1
                result.ttft_s.append(ttft)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - started
    return result
