"""The admin API on its own listener: routes, swap, gate, stats, records, /metrics.

Reading routes, the gate, stats and metrics is open (the listener is loopback
by default and Flagger/Argo webhooks must reach the gate); changing routes and
reading records need `Authorization: Bearer <token>`. Without a configured
token those endpoints refuse every caller.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from dataclasses import asdict
from typing import Any

from aiohttp import web

from proxy.metrics import CONTENT_TYPE_LATEST
from proxy.mirror.app import (
    CONFIG_KEY,
    EVIDENCE_KEY,
    METRICS_KEY,
    MIRROR_KEY,
    ROUTER_KEY,
    TASKS_KEY,
)
from proxy.mirror.config import ConfigError, RouteConfig
from proxy.mirror.load import LoopLoad
from proxy.mirror.remote import RemoteMirror, WorkerUnavailable

log = logging.getLogger(__name__)

MAIN_APP_KEY = web.AppKey("main_app", web.Application)
MAX_RECORDS_PAGE = 1000


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(data, default=str),
                        content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": {"message": message, "type": "vllm_cutover_admin_error"}}, status)


def _main(request: web.Request) -> web.Application:
    return request.app[MAIN_APP_KEY]


def _authorized(request: web.Request) -> web.Response | None:
    """None when the bearer token matches; otherwise the 401 to send."""
    token = _main(request)[CONFIG_KEY].admin.token
    if token is None:
        return _error(401, "no admin token configured (--admin-token or "
                           "VLLM_CUTOVER_ADMIN_TOKEN): this endpoint is disabled")
    sent = request.headers.get("Authorization", "")
    scheme, _, value = sent.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                             token.encode()):
        return _error(401, "missing or wrong bearer token")
    return None


async def get_routes(request: web.Request) -> web.Response:
    return _json(_main(request)[ROUTER_KEY].routes.as_json())


async def put_routes(request: web.Request) -> web.Response:
    if (denied := _authorized(request)) is not None:
        return denied
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "body must be JSON like {\"primary\": URL, \"shadow\": URL|null}")
    if not isinstance(body, dict) or not set(body) <= {"primary", "shadow", "baseline"}:
        return _error(400, f"expected keys primary/shadow/baseline, got {body!r}")
    main = _main(request)
    router = main[ROUTER_KEY]
    current = asdict(router.routes.as_config())
    current.update(body)
    try:
        routes = router.replace(RouteConfig(**current))
    except (ConfigError, TypeError) as exc:
        return _error(400, str(exc))
    main[METRICS_KEY].route_version.set(routes.version)
    return _json(routes.as_json())


async def post_swap(request: web.Request) -> web.Response:
    if (denied := _authorized(request)) is not None:
        return denied
    main = _main(request)
    try:
        routes = main[ROUTER_KEY].swap()
    except ValueError as exc:
        return _error(409, str(exc))
    main[METRICS_KEY].route_version.set(routes.version)
    return _json(routes.as_json())


def _unavailable(exc: WorkerUnavailable) -> web.Response:
    return _error(503, f"{exc}; try again shortly")


async def get_gate(request: web.Request) -> web.Response:
    """200 only on pass (409 otherwise), so Flagger/Argo webhooks can gate on it."""
    try:
        result = await _main(request)[EVIDENCE_KEY].gate()
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    return _json(result, 200 if result["verdict"] == "pass" else 409)


async def get_stats(request: web.Request) -> web.Response:
    main = _main(request)
    try:
        stats = await main[EVIDENCE_KEY].aggregates()
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    mirror = main[MIRROR_KEY]
    stats["live"] = {
        "shadow_inflight": mirror.inflight,
        "background_tasks": len(main[TASKS_KEY]),
        "routes": main[ROUTER_KEY].routes.as_json(),
        "proxy_loop": _load_json(mirror.load),
    }
    if isinstance(mirror, RemoteMirror):
        link = mirror.link
        stats["live"]["capture_worker"] = {
            "pid": link.pid, "running": link.ready, "restarts": link.restarts,
            "scheduling": link.scheduling, "loop": _load_json(link.load),
            "queued_bytes": link.backlog.queued_bytes,
            "queued_for_s": round(link.backlog.age_s(time.monotonic()), 3)}
    return _json(stats)


def _load_json(load: LoopLoad) -> dict[str, float]:
    return {"lag_ms": round(load.lag_s * 1000, 2), "busy": round(load.busy, 3)}


async def get_records(request: web.Request) -> web.Response:
    if (denied := _authorized(request)) is not None:
        return denied
    try:
        after_id = int(request.query.get("after", "0"))
        limit = min(int(request.query.get("limit", "100")), MAX_RECORDS_PAGE)
    except ValueError:
        return _error(400, f"after and limit must be integers, got {dict(request.query)!r}")
    try:
        records = await _main(request)[EVIDENCE_KEY].records(after_id, max(limit, 0))
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    return _json({"records": records})


async def get_metrics(request: web.Request) -> web.Response:
    body = await _main(request)[EVIDENCE_KEY].metrics()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_admin_app(main_app: web.Application) -> web.Application:
    """The admin application; it reads and changes the state of `main_app`."""
    admin = web.Application(client_max_size=1024 * 1024)
    admin[MAIN_APP_KEY] = main_app
    admin[METRICS_KEY] = main_app[METRICS_KEY]
    admin.router.add_get("/admin/routes", get_routes)
    admin.router.add_put("/admin/routes", put_routes)
    admin.router.add_post("/admin/swap", post_swap)
    admin.router.add_get("/admin/gate", get_gate)
    admin.router.add_get("/admin/stats", get_stats)
    admin.router.add_get("/admin/records", get_records)
    admin.router.add_get("/metrics", get_metrics)
    return admin
