"""Fake OpenAI-compatible backends (inline aiohttp handlers) and a proxy wired to them."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from proxy.mirror.app import STORE_KEY, TASKS_KEY, build_app
from proxy.mirror.config import AdminConfig, MirrorConfig, ProxyConfig, RouteConfig

TOKEN = "s3cret-admin-token"


@dataclass
class FakeBackend:
    """What a fake backend saw; knobs that change how it answers."""

    words: list[str] = field(default_factory=lambda: ["Hello", " world", "!", " Bye"])
    ttft_s: float = 0.0
    itl_s: float = 0.0
    mode: str = "ok"  # ok | reset | garbage | slow_headers | final_only (Responses: no deltas)
    usage_tokens: int | None = None  # usage.completion_tokens to report (None: the truth)
    seen: list[dict[str, Any]] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event | None = None  # when set: wait for it after the first chunk
    sent: int = 0  # bytes written by many_bytes
    tokenized: int = 0  # /tokenize calls
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/responses", self.respond)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_route("*", "/echo/{tail:.*}", self.echo)
        app.router.add_get("/bytes/{n}", self.many_bytes)
        return app

    async def many_bytes(self, request: web.Request) -> web.StreamResponse:
        """`n` bytes streamed in 64 KiB writes; `sent` counts what left (backpressure tests)."""
        total = int(request.match_info["n"])
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        block = bytes(range(256)) * 256
        try:
            while self.sent < total:
                piece = block[:total - self.sent]
                await resp.write(piece)
                self.sent += len(piece)
        except (ConnectionError, asyncio.CancelledError):
            self.cancelled.set()  # the proxy closed our connection
            raise
        return resp

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 0\n")

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append({"path": request.path_qs, "headers": dict(request.headers),
                          "raw": body})
        return web.Response(status=207, body=b"echo:" + body,
                            headers={"X-Backend": "yes", "Content-Type": "text/plain"})

    async def tokenize(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.tokenized += 1
        return web.json_response({"tokens": [ord(c) for c in data["prompt"]]})

    def _chunk(self, i: int, word: str, chat: bool, ids: bool) -> bytes:
        choice: dict[str, Any] = {"index": 0, "finish_reason": None}
        if chat:
            choice["delta"] = {"content": word}
        else:
            choice["text"] = word
        if ids:
            choice["token_ids"] = [1000 + i]
        if i == len(self.words) - 1:
            choice["finish_reason"] = "stop"
        return b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n"

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            req = json.loads(body)
        except ValueError:
            self.seen.append({"raw": body, "headers": dict(request.headers)})
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        self.seen.append({"json": req, "headers": dict(request.headers), "raw": body})
        chat = request.path.endswith("chat/completions")
        ids = req.get("return_token_ids") is True
        try:
            if self.mode == "slow_headers":
                await asyncio.sleep(self.ttft_s)
            if not req.get("stream"):
                await asyncio.sleep(self.ttft_s + self.itl_s * len(self.words))
                text = "".join(self.words)
                choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
                choice["message" if chat else "text"] = (
                    {"role": "assistant", "content": text} if chat else text)
                if ids:
                    choice["token_ids"] = [1000 + i for i in range(len(self.words))]
                return web.json_response({"id": "x", "choices": [choice], "usage": {
                    "completion_tokens": self._usage()}})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if self.mode == "garbage":
                await resp.write(b"data: {not json at all\n\n\x00\xff garbage\n\n")
                return resp
            await asyncio.sleep(self.ttft_s)
            for i, word in enumerate(self.words):
                await resp.write(self._chunk(i, word, chat, ids))
                if i == 0 and self.gate is not None:
                    await self.gate.wait()
                if self.mode == "reset" and i == 1:
                    assert request.transport is not None
                    request.transport.abort()
                    return resp
                await asyncio.sleep(self.itl_s)
            if self.usage_tokens is not None:
                await resp.write(b"data: " + json.dumps({"id": "x", "choices": [], "usage": {
                    "completion_tokens": self._usage()}}).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def _usage(self) -> int:
        return len(self.words) if self.usage_tokens is None else self.usage_tokens

    async def respond(self, request: web.Request) -> web.StreamResponse:
        """The Responses API, streamed: a text delta per word (none with mode final_only),
        then `response.completed` with the whole answer."""
        req = await request.json()
        self.seen.append({"json": req, "headers": dict(request.headers)})
        text = "".join(self.words)
        final = {"id": "resp_1", "object": "response", "status": "completed",
                 "output": [{"type": "message", "role": "assistant", "content": [
                     {"type": "output_text", "text": text}]}],
                 "usage": {"output_tokens": self._usage()}}
        if not req.get("stream"):
            return web.json_response(final)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        events: list[dict[str, Any]] = [] if self.mode == "final_only" else [
            {"type": "response.output_text.delta", "delta": word} for word in self.words]
        events.append({"type": "response.completed", "response": final})
        for event in events:
            await resp.write(b"event: " + event["type"].encode() + b"\ndata: "
                             + json.dumps(event).encode() + b"\n\n")
        return resp


def _dead_url(held: list[socket.socket]) -> str:
    """A loopback URL nothing listens on: the port stays bound, not listening, until the
    test ends, so no server started later in the test can take it (connects get refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    return f"http://127.0.0.1:{s.getsockname()[1]}"


Start = Callable[..., Awaitable[FakeBackend]]


@pytest.fixture
def backend(aiohttp_server: Any) -> Start:
    async def start(**kwargs: Any) -> FakeBackend:
        fake = FakeBackend(**kwargs)
        server = await aiohttp_server(fake.app())
        fake.url = str(server.make_url("")).rstrip("/")
        return fake

    return start


def _make_config(primary: str, shadow: str | None, baseline: str | None = None,
                **mirror: Any) -> ProxyConfig:
    extra = {k: mirror.pop(k) for k in ("max_body_bytes", "store", "gate", "capture_worker",
                                             "worker_priority")
             if k in mirror}
    # In-process unless a test asks for the worker: these tests look inside the exchange.
    extra.setdefault("capture_worker", False)
    # No overload shedding unless a test asks: a busy CI machine must not drop mirrors.
    mirror.setdefault("overload_lag_s", 0.0)
    return ProxyConfig(routes=RouteConfig(primary, shadow, baseline), port=0,
                       mirror=MirrorConfig(**mirror), admin=AdminConfig(token=TOKEN),
                       **extra)


@pytest.fixture
def proxy(aiohttp_client: Any) -> Callable[..., Awaitable[Any]]:
    async def start(config: ProxyConfig) -> Any:
        app = build_app(config, CollectorRegistry())
        return await aiohttp_client(app)

    return start


async def _settle(app: web.Application, timeout_s: float = 5.0) -> None:
    """Wait for the background tasks (shadows, finalize) and the store writes."""
    tasks = app[TASKS_KEY]
    for _ in range(int(timeout_s / 0.01)):
        if len(tasks) == 0:
            break
        await asyncio.sleep(0.01)
    assert len(tasks) == 0, "background tasks still running"
    await app[STORE_KEY].flush()


@pytest.fixture
def dead_url() -> Iterator[Callable[[], str]]:
    held: list[socket.socket] = []
    yield lambda: _dead_url(held)
    for s in held:
        s.close()


@pytest.fixture
def make_config() -> Callable[..., ProxyConfig]:
    return _make_config


@pytest.fixture
def settle() -> Callable[..., Awaitable[None]]:
    return _settle


@pytest.fixture
def admin(aiohttp_client: Any) -> Callable[..., Awaitable[Any]]:
    """A test client of the admin app of a started main app."""
    from proxy.mirror.admin.api import build_admin_app

    async def start(main_app: web.Application) -> Any:
        return await aiohttp_client(build_admin_app(main_app))

    return start
