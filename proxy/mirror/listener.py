"""The listeners' protocol: aiohttp's, with limits against slow and malformed clients.

- Header timeout: a connection must send a complete request head within
  `header_timeout_s` of opening, or of its previous answer (aiohttp's keep-alive timer,
  which it also arms when a connection opens and does not move when bytes trickle in):
  slowloris connections are closed, and so are keep-alive connections idle that long.
- Idle connections per client IP are capped: one more closes that address's oldest
  idle one (an idle keep-alive connection closed is ordinary HTTP; clients reconnect).
- A request aiohttp cannot parse gets a short JSON 400 (nothing of it echoed) and one
  log line at most every `LOG_EVERY_S`, counting the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0
# Request line and header field limits (aiohttp's 8 KiB is short for long bearer tokens).
HEAD_LIMITS = {"max_field_size": 65536, "max_line_size": 65536}


class RateLimitedLog:
    """At most one warning per `every_s`; the ones held back are counted in the next."""

    def __init__(self, every_s: float = LOG_EVERY_S) -> None:
        self.every_s = every_s
        self._last = -every_s
        self.suppressed = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self.suppressed += 1
            return
        self._last = now
        if self.suppressed:
            message += " (%d more like it in the last %.0f s not logged)"
            args = (*args, self.suppressed, self.every_s)
            self.suppressed = 0
        log.warning(message, *args)


class ClientGuard:
    """Idle connections per client IP, oldest first; closes the oldest beyond the cap."""

    def __init__(self, max_idle_per_ip: int, on_close: Callable[[], None] = lambda: None
                 ) -> None:
        self.max_idle_per_ip = max_idle_per_ip
        self._idle: dict[str, dict[RequestHandler, None]] = {}
        self._on_close = on_close  # counted (idle_connections_closed)
        self.bad_requests = RateLimitedLog()

    def idle(self, handler: RequestHandler, ip: str) -> None:
        handlers = self._idle.setdefault(ip, {})
        handlers.pop(handler, None)
        handlers[handler] = None
        while len(handlers) > self.max_idle_per_ip:
            oldest = next(iter(handlers))
            del handlers[oldest]
            self._on_close()
            oldest.force_close()

    def busy(self, handler: RequestHandler, ip: str) -> None:
        handlers = self._idle.get(ip)
        if handlers is not None:
            handlers.pop(handler, None)
            if not handlers:
                del self._idle[ip]

    def idle_count(self, ip: str) -> int:
        return len(self._idle.get(ip, ()))


class GuardedRequestHandler(RequestHandler):
    """aiohttp's protocol, reporting to a `ClientGuard` and answering parse errors short."""

    __slots__ = ("_guard", "_peer_ip")

    def __init__(self, manager: web.Server, *, guard: ClientGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._peer_ip = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._peer_ip = str(peer[0]) if peer else "?"
        super().connection_made(transport)
        self._guard.idle(self, self._peer_ip)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.busy(self, self._peer_ip)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Bytes arriving are a request on its way: from here until its answer ends the
        # connection is not idle, so the cap never closes one whose request was read but
        # whose handler has not started yet (a partial head is the header timeout's).
        self._guard.busy(self, self._peer_ip)
        super().data_received(data)

    def request_started(self) -> None:
        self._guard.busy(self, self._peer_ip)

    def request_finished(self) -> None:
        if self.transport is not None:
            self._guard.idle(self, self._peer_ip)

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == 500:
            return super().handle_error(request, status, exc, message)
        self._guard.bad_requests.warning(
            "refused a malformed request from %s: %s (%d characters of error text not "
            "logged or echoed)", self._peer_ip, type(exc).__name__, len(message or ""))
        resp = web.json_response(status=status, data={"error": {
            "message": f"malformed HTTP request ({type(exc).__name__}); a body needs a "
                       "Content-Length or chunked encoding",
            "type": "vllm_cutover_proxy_error"}})
        resp.force_close()
        return resp


@web.middleware
async def track_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    """Marks the connection busy while a request is handled (idle again after); the
    admin app's (the client app's handler does the same without a middleware's cost)."""
    protocol = request.protocol
    if not isinstance(protocol, GuardedRequestHandler):
        return await handler(request)
    protocol.request_started()
    try:
        return await handler(request)
    finally:
        protocol.request_finished()


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections are `GuardedRequestHandler`s."""

    __slots__ = ("_handler_kwargs", "_host", "_port", "bound_port")

    def __init__(self, runner: web.AppRunner, host: str, port: int, backlog: int,
                 **handler_kwargs: Any) -> None:
        super().__init__(runner, backlog=backlog)
        self._host, self._port = host, port
        self._handler_kwargs = handler_kwargs
        self.bound_port = port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.bound_port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        kwargs = self._handler_kwargs

        def protocol() -> GuardedRequestHandler:
            return GuardedRequestHandler(server, loop=loop, **kwargs)

        self._server = await loop.create_server(protocol, self._host, self._port,
                                                backlog=self._backlog, reuse_address=True)
        if self._server.sockets:
            self.bound_port = int(self._server.sockets[0].getsockname()[1])
