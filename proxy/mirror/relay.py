"""Forwarding to the primary: headers in and out, raw bytes relayed chunk by chunk.

The client gets the primary's status, headers (minus hop-by-hop) and body bytes
unchanged, each chunk written as soon as it arrives. Errors the proxy itself
produces are marked (`X-Vllm-Cutover-Error: 1` and a JSON body whose error type
is `vllm_cutover_proxy_error`) so nobody mistakes them for vLLM's answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.mirror.routing import Upstream

log = logging.getLogger(__name__)

PROXY_ERROR_HEADER = "X-Vllm-Cutover-Error"
PROXY_ERROR_TYPE = "vllm_cutover_proxy_error"
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
})
# Set by aiohttp from the body (Content-Length) or for the upstream (Host); the body is
# already read, so an Expect: 100-continue would only cost the upstream a round trip.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "expect"}
ChunkTap = Callable[[bytes, float], None]
TapFactory = Callable[[aiohttp.ClientResponse], ChunkTap]


def _connection_tokens(headers: CIMultiDictProxy[str]) -> frozenset[str]:
    value = headers.get("Connection")
    if not value:
        return frozenset()
    return frozenset(t.strip().lower() for t in value.split(",") if t.strip())


def filter_headers(headers: CIMultiDictProxy[str], drop: frozenset[str]) -> CIMultiDict[str]:
    """Copy `headers` without hop-by-hop ones (including those named by Connection)."""
    extra = _connection_tokens(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower not in drop and lower not in extra:
            out.add(name, value)
    return out


def request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return filter_headers(headers, _REQUEST_DROP)


def response_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return filter_headers(headers, HOP_BY_HOP)


def proxy_error(status: int, message: str) -> web.Response:
    """An error produced by the proxy itself, marked as such."""
    body = json.dumps({"error": {"message": message, "type": PROXY_ERROR_TYPE, "code": status}})
    return web.Response(status=status, text=body, content_type="application/json",
                        headers={PROXY_ERROR_HEADER: "1"})


def upstream_url(upstream: Upstream, request: web.BaseRequest) -> URL:
    return URL(upstream.url + request.raw_path, encoded=True)


@dataclass
class RelayResult:
    """What happened on the primary path (mutable: filled while relaying)."""

    status: int | None = None
    error: str | None = None  # "connect", "timeout", "reset", ...
    cancelled: bool = False  # the client went away
    capture_failed: bool = False
    t_end: float = 0.0


async def relay(
    request: web.Request,
    upstream: Upstream,
    body: bytes,
    headers: CIMultiDict[str],
    result: RelayResult,
    tap_for: TapFactory | None = None,
) -> web.StreamResponse:
    """Send the request to `upstream` and stream its answer to the client.

    `tap_for(response)` gives a `tap(chunk, t)` that sees every relayed chunk after
    it was written to the client; a failing tap is dropped, the relay goes on.
    On cancellation (client gone) the upstream response is closed at once, which
    makes vLLM abort the generation, and the CancelledError propagates.
    """
    try:
        upstream_resp = await upstream.session.request(
            request.method, upstream_url(upstream, request), headers=headers,
            data=body if body else None, allow_redirects=False,
        )
    except asyncio.CancelledError:
        result.cancelled = True
        result.t_end = perf_counter()
        raise
    except asyncio.TimeoutError:
        result.error = "timeout"
        result.t_end = perf_counter()
        return proxy_error(504, f"timed out connecting to the primary {upstream.url}")
    except (aiohttp.ClientError, OSError) as exc:
        result.error = "connect"
        result.t_end = perf_counter()
        if upstream.should_warn():
            log.warning("primary %s unreachable: %s", upstream.url, exc)
        return proxy_error(502, f"primary {upstream.url} unreachable: {type(exc).__name__}")

    result.status = upstream_resp.status
    out = web.StreamResponse(status=upstream_resp.status, reason=upstream_resp.reason,
                             headers=response_headers(upstream_resp.headers))
    try:
        await out.prepare(request)
        tap = tap_for(upstream_resp) if tap_for is not None else None
        async for chunk in upstream_resp.content.iter_any():
            await out.write(chunk)
            if tap is not None:
                try:
                    tap(chunk, perf_counter())
                except Exception:  # capture must never break the client
                    log.exception("capture failed; relaying on without it")
                    tap = None
                    result.capture_failed = True
        result.t_end = perf_counter()
    except asyncio.CancelledError:
        result.cancelled = True
        result.t_end = perf_counter()
        upstream_resp.close()
        raise
    except (aiohttp.ClientError, OSError) as exc:
        result.t_end = perf_counter()
        upstream_resp.close()
        transport = request.transport
        if transport is None or transport.is_closing():
            result.cancelled = True
        else:
            # The primary broke mid-answer: end the client's connection the same way
            # (no clean end of body), as if it had talked to the primary directly.
            result.error = "reset"
            if upstream.should_warn():
                log.warning("primary %s failed mid-response: %s", upstream.url,
                            type(exc).__name__)
            transport.close()
    finally:
        upstream_resp.release()
    return out
