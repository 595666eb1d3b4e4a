"""The shadow side: sampling, sending a mirrored request, and re-tokenizing text.

Everything here runs in background tasks, never on the client's path, and turns
every failure (refused, timed out, reset, garbage) into data: a `Capture` with
`error` set, or None for a failed /tokenize.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Mapping
from time import perf_counter

import aiohttp
from multidict import CIMultiDict

from proxy.compare.capture import CaptureBuilder
from proxy.compare.types import Capture, Role
from proxy.mirror.routing import Upstream

log = logging.getLogger(__name__)

MAX_SHADOW_RESPONSE_BYTES = 64 * 1024 * 1024


class Sampler:
    """Decides whether a request is mirrored: a rate, optionally consistent by a header."""

    def __init__(self, rate: float, header: str | None = None,
                 rng: random.Random | None = None) -> None:
        self.rate = rate
        self.header = header
        self._random = (rng or random.Random()).random

    def sample(self, headers: Mapping[str, str]) -> bool:
        if self.rate >= 1.0:
            return True
        if self.rate <= 0.0:
            return False
        if self.header is not None:
            value = headers.get(self.header)
            if value is not None:
                # Same header value -> same decision, in every proxy replica.
                digest = hashlib.blake2b(value.encode("utf-8", "replace"), digest_size=8)
                return int.from_bytes(digest.digest(), "big") / 2.0**64 < self.rate
        return self._random() < self.rate


def classify_error(exc: BaseException) -> str:
    """A short, bounded name for what went wrong talking to a backend."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                        ConnectionResetError, aiohttp.ClientOSError)):
        return "reset"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "bad_response"
    return "client_error"


async def fetch_capture(
    upstream: Upstream,
    role: Role,
    label: str,
    path: str,
    headers: CIMultiDict[str],
    body: bytes,
    timeout_s: float,
) -> Capture:
    """POST the mirrored request and capture the answer; never raises (except on shutdown).

    Cancellation (the client went away, or shutdown) closes the connection, so the
    backend aborts the generation, and yields a Capture marked cancelled.
    """
    builder = CaptureBuilder(role, label, perf_counter())
    status: int | None = None
    try:
        async with upstream.session.post(
            upstream.url + path, data=body, headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False,
        ) as resp:
            status = resp.status
            stream = resp.content_type == "text/event-stream"
            feed = builder.on_chunk if stream else builder.on_body
            received = 0
            async for chunk in resp.content.iter_any():
                feed(chunk, perf_counter())
                received += len(chunk)
                if builder.error is not None or received > MAX_SHADOW_RESPONSE_BYTES:
                    resp.close()
                    error = builder.error or "too_large"
                    return builder.finish(status, perf_counter(), error=error)
        return builder.finish(status, perf_counter())
    except asyncio.CancelledError:
        return builder.finish(status, perf_counter(), cancelled=True)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        return builder.finish(status, perf_counter(), error=classify_error(exc))
    except Exception as exc:  # noqa: BLE001 - a shadow must never take the proxy down
        log.warning("%s %s: unexpected %s", role, upstream.url, type(exc).__name__)
        return builder.finish(status, perf_counter(), error="internal")


async def tokenize(
    upstream: Upstream,
    text: str,
    headers: CIMultiDict[str],
    timeout_s: float,
) -> tuple[int, ...] | None:
    """Token ids of `text` from the backend's /tokenize (no special tokens); None on failure."""
    payload = {"prompt": text, "add_special_tokens": False}
    try:
        async with upstream.session.post(
            upstream.url + "/tokenize", json=payload, headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError):
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return None
    return tuple(tokens)
