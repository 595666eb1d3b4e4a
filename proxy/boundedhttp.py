"""One-shot HTTP reads of the CLI (`verify`, `eval`, `gate`, the fleet's Prometheus) with
a bound on the answer's size and on the read's total time.

urllib's `timeout` bounds each socket operation, not the whole read: an answer that
never ends, or trickles a byte a second, is read forever and into memory. Here the body
is read in pieces, each with the time left as its socket timeout, and the read stops at
`max_bytes` or the deadline with an `AnswerOverLimit` naming the URL and the limit. JSON
is decoded with its nesting bounded (`json_answer`, as the admin API's bodies), so a deep answer is an error too.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from typing import Any

from proxy.jsontext import parse_json

CHUNK_BYTES = 65536
# The default bound of one answer: an engine's /metrics, a Prometheus vector, an eval
# answer with logprobs are far smaller; a broken peer's answer may never end.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class AnswerOverLimit(Exception):
    """An answer larger or slower than its bound (one line: the URL and the limit)."""


class Unreachable(Exception):
    """The URL could not be asked (connection refused, DNS, TLS, a socket timeout)."""


def over_size(url: str, max_bytes: int) -> AnswerOverLimit:
    return AnswerOverLimit(f"{url}: the answer is larger than {max_bytes} bytes (stopped "
                           "reading there)")


def read_body(response: Any, url: str, max_bytes: int, deadline: float) -> bytes:
    """The body of an open `http.client.HTTPResponse`, at most `max_bytes`, read by
    `deadline` (time.monotonic()); AnswerOverLimit beyond either."""
    parts: list[bytes] = []
    size = 0
    sock = _socket_of(response)
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise AnswerOverLimit(f"{url}: the answer took longer than its time limit "
                                  f"({size} bytes read)")
        if sock is not None:
            sock.settimeout(left_s)
        try:
            chunk = response.read1(min(CHUNK_BYTES, max_bytes + 1 - size))
        except TimeoutError:
            raise AnswerOverLimit(f"{url}: the answer took longer than its time limit "
                                  f"({size} bytes read)") from None
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise over_size(url, max_bytes)
        parts.append(chunk)


def get(request: str | urllib.request.Request, timeout_s: float,
        max_bytes: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
    """(status, body) of one request, HTTP errors included (their body bounded too);
    Unreachable when there is no answer, AnswerOverLimit past `max_bytes` or `timeout_s`
    in all (connecting, the head and the body)."""
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), read_body(response, url, max_bytes, deadline)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, read_body(exc, url, max_bytes, deadline)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"cannot reach {url}: {reason}") from None


def json_answer(raw: bytes, url: str) -> Any:
    """`raw` as JSON; ValueError naming the URL when it is not JSON or nests deeper than
    `proxy.jsontext.MAX_JSON_DEPTH` (never a RecursionError)."""
    try:
        return parse_json(raw)
    except ValueError as exc:
        raise ValueError(f"{url}: the answer {str(exc).removeprefix('body ')}") from None


def _socket_of(response: Any) -> socket.socket | None:
    # http.client keeps the socket behind its buffered file (fp.raw._sock; an HTTPError
    # wraps that response once more); without it, each read is still bounded by urlopen's
    # timeout and the deadline is checked between reads.
    for _ in range(3):
        response = getattr(response, "fp", None)
        sock = getattr(getattr(response, "raw", None), "_sock", None)
        if isinstance(sock, socket.socket):
            return sock
    return None
