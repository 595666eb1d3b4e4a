"""The shadow side: sampling, sending a mirrored request, and re-tokenizing text.

Everything here runs in background tasks, never on the client's path, and turns
every failure (refused, timed out, reset, garbage) into data: a `Capture` with
`error` set, or None for a failed /tokenize.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from collections.abc import Mapping
from time import perf_counter

from multidict import CIMultiDict

from proxy.capture.builder import CaptureBuilder
from proxy.capture.request import json_bytes
from proxy.capture.types import Capture, Role
from proxy.mirror.config import DEFAULT_MAX_SHADOW_ANSWER_BYTES
from proxy.mirror.upstream.http1 import Feed, Http1Connection, UpstreamError, within
from proxy.mirror.upstream.routing import Upstream

log = logging.getLogger(__name__)

MAX_SHADOW_RESPONSE_BYTES = DEFAULT_MAX_SHADOW_ANSWER_BYTES
MAX_TOKENIZE_RESPONSE_BYTES = 16 * 1024 * 1024


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


def mirror_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """The client's headers for a mirrored request, asking for an uncompressed answer."""
    out = headers.copy()
    out.popall("Accept-Encoding", None)  # identity: the capture reads the bytes
    return out


async def fetch_capture(
    upstream: Upstream,
    role: Role,
    label: str,
    path: str,
    headers: CIMultiDict[str],
    body: bytes,
    timeout_s: float,
    max_bytes: int = MAX_SHADOW_RESPONSE_BYTES,
) -> Capture:
    """POST the mirrored request and capture the answer; never raises.

    `headers` are already as `mirror_headers` makes them. An answer over `max_bytes` is
    recorded `too_large`: nothing more is read and what was held is freed. Cancellation (the client
    went away, or shutdown) closes the connection, so the backend aborts the
    generation, and yields a Capture marked cancelled.
    """
    builder = CaptureBuilder(role, label, perf_counter())
    status: int | None = None

    def feed_for(conn: Http1Connection) -> Feed:
        nonlocal status
        assert conn.head is not None
        status = conn.head.status
        # Timed from the moment the request went out, as the primary's is: a worker that
        # waited for the CPU (or a connection) before sending has not made the backend slow.
        builder.t_start = conn.sent_at
        parse = builder.on_chunk if conn.head.content_type == "text/event-stream" \
            else builder.on_body

        def feed(payload: bytes, t: float) -> None:
            parse(payload, t)
            if builder.error is not None:
                conn.fail(builder.error)  # garbage: stop reading at once
            elif conn.received > max_bytes:
                builder.abandon("too_large")  # what was held goes now, the rest unread
                conn.fail("too_large")

        return feed

    try:
        await within(upstream.pool.fetch("POST", path, headers, body, feed_for), timeout_s)
        return builder.finish(status, perf_counter())
    except asyncio.CancelledError:
        return builder.finish(status, perf_counter(), cancelled=True)
    except asyncio.TimeoutError:
        return builder.finish(status, perf_counter(), error="timeout")
    except UpstreamError as exc:
        return builder.finish(status, perf_counter(), error=builder.error or exc.kind)
    except Exception as exc:  # noqa: BLE001 - a shadow must never take the proxy down
        log.warning("%s %s: unexpected %s", role, upstream.url, type(exc).__name__)
        return builder.finish(status, perf_counter(), error="internal")


async def tokenize(
    upstream: Upstream,
    text: str,
    headers: CIMultiDict[str],
    timeout_s: float,
) -> tuple[int, ...] | None:
    """Token ids of `text` from the backend's /tokenize (no special tokens); None on failure.

    `headers` carry the client's Authorization and `Content-Type: application/json`.
    """
    payload = json_bytes({"prompt": text, "add_special_tokens": False})
    parts: list[bytes] = []

    def feed_for(conn: Http1Connection) -> Feed:
        def feed(data: bytes, t: float) -> None:
            parts.append(data)
            if conn.received > MAX_TOKENIZE_RESPONSE_BYTES:
                conn.fail("too_large")

        return feed

    try:
        head = await within(
            upstream.pool.fetch("POST", "/tokenize", headers, payload, feed_for), timeout_s)
        if head.status != 200:
            return None
        data = json.loads(b"".join(parts))
    except (UpstreamError, asyncio.TimeoutError, ValueError):
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return None
    return tuple(tokens)
