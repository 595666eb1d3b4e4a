"""What every admin endpoint shares: JSON answers and errors, bearer tokens, JSON bodies
read with a depth limit, and a middleware that makes every HTTP error a JSON one.

Both admin apps (the proxy's, `proxy.mirror.admin.api`, and the cutover's endpoints on it,
`proxy.cutover.shell.admin`) import these public names; neither imports the other's helpers.
Bad input is a 4xx with a JSON body, never a 500: header bytes that are not UTF-8, JSON
nested deeper than `proxy.jsontext.MAX_JSON_DEPTH`, a wrong method (405 with `Allow`). An
error never quotes a token back, and every answer has URL credentials redacted.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from proxy.credentials import redact_json
from proxy.jsontext import parse_json

log = logging.getLogger(__name__)

ERROR_TYPE = "vllm_cutover_admin_error"

Authorize = Callable[[web.Request], "web.Response | None"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
S = TypeVar("S")


def json_answer(data: Any, status: int = 200) -> web.Response:
    """Every admin answer: JSON with the credentials of any URL in it redacted."""
    return web.Response(status=status, text=json.dumps(redact_json(data), default=str),
                        content_type="application/json")


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    return json_answer({"error": {"message": message, "type": ERROR_TYPE}, **extra}, status)


def service_or_error(request: web.Request, mutating: bool,
                     get_service: Callable[[web.Request], S | None], authorize: Authorize,
                     not_enabled: str) -> S | web.Response:
    """The service an endpoint acts on, or the answer to send instead: 401 for a change
    without the admin token, 501 where this proxy does not run the service."""
    if mutating and (denied := authorize(request)) is not None:
        return denied
    service = get_service(request)
    return json_error(501, not_enabled) if service is None else service


def bearer_token(request: web.Request) -> str | None:
    """The `Authorization: Bearer` value (None for another scheme or none)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def token_matches(sent: Iterable[str | None], accepted: Iterable[str]) -> bool:
    """Any sent value equals any accepted token, compared in constant time; header bytes
    that are not UTF-8 (kept by the parser as surrogates) simply do not match."""
    sent_bytes = [s.encode("utf-8", "surrogateescape") for s in sent if s]
    return any(hmac.compare_digest(s, t.encode()) for s in sent_bytes for t in accepted)


def authorize(request: web.Request, token: str | None) -> web.Response | None:
    """None when the bearer token is `token`; otherwise the 401 to send."""
    if token is None:
        return json_error(401, "no admin token configured (--admin-token or "
                               "VLLM_CUTOVER_ADMIN_TOKEN): this endpoint is disabled")
    if not token_matches([bearer_token(request)], [token]):
        return json_error(401, "missing or wrong bearer token")
    return None


async def read_json(request: web.Request) -> Any:
    """The request's JSON body (None when empty); ValueError as `parse_json`."""
    raw = await request.read()
    return None if not raw.strip() else parse_json(raw)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every HTTP error of the admin listener as a JSON body with its status (404, 405
    with `Allow`, 413 ...); undecodable input as 400."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        answer = json_error(exc.status, exc.reason if exc.status != 405 else
                            f"{request.method} is not allowed on {request.path}")
        if "Allow" in exc.headers:
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except UnicodeError:
        return json_error(400, "the request holds bytes that are not valid UTF-8")
