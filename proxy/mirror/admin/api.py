"""The admin API on its own listener: routes, swap, gate, stats, records, /metrics.

Reading routes, the gate, stats and metrics is open (the listener is loopback
by default and Flagger/Argo webhooks must reach the gate); changing routes and
reading records need `Authorization: Bearer <token>`. Without a configured
token those endpoints refuse every caller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from proxy.adminhttp import authorize, json_answer, json_error, json_errors, read_json
from proxy.cutover.control import RouteConflict
from proxy.cutover.shell.admin import add_cutover_routes
from proxy.cutover.shell.service import CUTOVER_KEY
from proxy.metrics import CONTENT_TYPE_LATEST
from proxy.mirror.admin.gate_hooks import FLAGGER_LAST_KEY, add_gate_hooks
from proxy.mirror.app import (
    CONFIG_KEY,
    CONTROL_KEY,
    EVIDENCE_KEY,
    METRICS_KEY,
    MIRROR_KEY,
    ROUTER_KEY,
    TASKS_KEY,
)
from proxy.mirror.config import ProxyConfig
from proxy.mirror.control import MirrorControl, redacted_view
from proxy.mirror.listener import track_requests
from proxy.mirror.load import LoopLoad
from proxy.mirror.route_state import ROUTE_KEYS, routes_from_json
from proxy.mirror.worker.link import WorkerUnavailable
from proxy.mirror.worker.remote import RemoteMirror
from proxy.tune.admin import add_tune_routes
from proxy.tune.service import TUNE_KEY
from proxy.urls import role_conflicts, self_conflicts

log = logging.getLogger(__name__)

MAIN_APP_KEY = web.AppKey("main_app", web.Application)
MAX_RECORDS_PAGE = 1000


def _main(request: web.Request) -> web.Application:
    return request.app[MAIN_APP_KEY]


def _authorized(request: web.Request) -> web.Response | None:
    """None when the bearer token is the admin token; otherwise the 401 to send."""
    return authorize(request, _main(request)[CONFIG_KEY].admin.token)


async def get_routes(request: web.Request) -> web.Response:
    routes = _main(request)[ROUTER_KEY].routes
    response = json_answer(routes.as_json())
    response.headers["ETag"] = f'"{routes.version}"'  # If-Match takes it back
    return response


def _expected_version(request: web.Request, body: dict[str, Any]) -> int | None:
    """The version a change is conditional on: `expect_version` in the body or an
    `If-Match: N` header (None: unconditional). ValueError quoting a bad value."""
    found: list[int] = []
    if "expect_version" in body:
        value = body["expect_version"]
        if type(value) is not int or value < 0:
            raise ValueError(f"expect_version must be an integer >= 0, got {value!r}")
        found.append(value)
    header = request.headers.get("If-Match")
    if header is not None and header.strip() != "*":
        text = header.strip().removeprefix("W/").strip('"')
        if not text.isdigit():
            raise ValueError(f"If-Match must be a routes version like \"3\", got {header!r}")
        found.append(int(text))
    if len(set(found)) > 1:
        raise ValueError(f"expect_version {found[0]} and If-Match {found[1]} disagree")
    return found[0] if found else None


async def _json_object(request: web.Request, allowed: set[str],
                       required: bool = True) -> dict[str, Any]:
    """The request's JSON object (empty when optional and absent); ValueError quoting it."""
    if not required and not request.can_read_body:
        return {}
    try:
        body = await read_json(request)
    except ValueError as exc:
        raise ValueError(f"{exc}; expected JSON like {{\"primary\": URL, \"shadow\": "
                         "URL|null, \"expect_version\": N}}") from None
    if not isinstance(body, dict) or not set(body) <= allowed:
        raise ValueError(f"expected a JSON object with keys among {sorted(allowed)}, "
                         f"got {body!r}")
    return body


def _conflict(exc: RouteConflict, control: MirrorControl) -> web.Response:
    return json_error(409, str(exc), routes=redacted_view(control.routes()))


async def put_routes(request: web.Request) -> web.Response:
    """Change some routes (keys left out stay); compare-and-set with `expect_version`."""
    if (denied := _authorized(request)) is not None:
        return denied
    control = _main(request)[CONTROL_KEY]
    try:
        body = await _json_object(request, {*ROUTE_KEYS, "expect_version"})
        expect = _expected_version(request, body)
        routes = routes_from_json(body, _main(request)[ROUTER_KEY].routes.as_config())
        errors, warnings = await asyncio.to_thread(role_conflicts, routes.primary,
                                                   routes.shadow, routes.baseline)
        errors += await asyncio.to_thread(self_conflicts, {
            "primary": routes.primary, "shadow": routes.shadow, "baseline": routes.baseline},
            _listeners(_main(request)[CONFIG_KEY]))
        if errors:  # the evidence would mean nothing: refused, nothing changed
            return json_error(400, "; ".join(errors))
        view = redacted_view(control.set_routes(routes.primary, routes.shadow,
                                                routes.baseline, expect))
        for warning in warnings:
            log.warning("routes changed: %s", warning)
        return json_answer({**view, "warnings": warnings} if warnings else view)
    except RouteConflict as exc:
        return _conflict(exc, control)
    except ValueError as exc:  # ConfigError included
        return json_error(400, str(exc))
    except OSError as exc:
        log.error("routes not changed: the state file cannot be written: %s", exc)
        return json_error(503, f"routes not changed: the state file cannot be written: {exc}")


def _listeners(config: ProxyConfig) -> tuple[tuple[str, int], ...]:
    """The proxy's own listeners (client and admin): no route may lead back into them."""
    admin = config.admin
    return ((config.host, config.port),) + (
        ((admin.host, admin.port),) if admin.port else ())


async def post_swap(request: web.Request) -> web.Response:
    if (denied := _authorized(request)) is not None:
        return denied
    control = _main(request)[CONTROL_KEY]
    try:
        expect = _expected_version(request, await _json_object(request, {"expect_version"},
                                                                required=False))
    except ValueError as exc:
        return json_error(400, str(exc))
    try:
        return json_answer(redacted_view(control.swap(expect)))
    except RouteConflict as exc:
        return _conflict(exc, control)
    except ValueError as exc:
        return json_error(409, str(exc))
    except OSError as exc:
        return json_error(503, f"routes not changed: the state file cannot be written: {exc}")


def _unavailable(exc: WorkerUnavailable) -> web.Response:
    return json_error(503, f"{exc}; try again shortly")


async def get_gate(request: web.Request) -> web.Response:
    """200 only on pass (409 otherwise), so Flagger/Argo webhooks can gate on it."""
    try:
        result = await _main(request)[EVIDENCE_KEY].gate()
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    return json_answer(result.as_json(), result.verdict.http_status)


async def get_stats(request: web.Request) -> web.Response:
    main = _main(request)
    try:
        stats = await main[EVIDENCE_KEY].aggregates()
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    mirror = main[MIRROR_KEY]
    stats["live"] = {
        "shadow_inflight": mirror.admission.inflight,
        "inflight": main[CONTROL_KEY].inflight_by_lane(),
        "background_tasks": len(main[TASKS_KEY]),
        "routes": main[ROUTER_KEY].routes.as_json(),
        "proxy_loop": _load_json(mirror.admission.load),
        "flagger": request.app.get(FLAGGER_LAST_KEY) or None,
    }
    if isinstance(mirror, RemoteMirror):
        link = mirror.link
        stats["live"]["capture_worker"] = {
            "pid": link.pid, "running": link.ready, "restarts": link.restarts,
            "scheduling": link.scheduling, "loop": _load_json(link.load),
            "queued_bytes": link.backlog.queued_bytes,
            "queued_for_s": round(link.backlog.age_s(time.monotonic()), 3)}
    return json_answer(stats)


def _load_json(load: LoopLoad) -> dict[str, float]:
    return {"lag_ms": round(load.lag_s * 1000, 2), "busy": round(load.busy, 3)}


async def get_records(request: web.Request) -> web.Response:
    if (denied := _authorized(request)) is not None:
        return denied
    try:
        after_id = int(request.query.get("after", "0"))
        limit = min(int(request.query.get("limit", "100")), MAX_RECORDS_PAGE)
    except ValueError:
        return json_error(400, f"after and limit must be integers, got {dict(request.query)!r}")
    try:
        records = await _main(request)[EVIDENCE_KEY].records(after_id, max(limit, 0))
    except WorkerUnavailable as exc:
        return _unavailable(exc)
    return json_answer({"records": records})


async def get_metrics(request: web.Request) -> web.Response:
    body = await _main(request)[EVIDENCE_KEY].metrics()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_admin_app(main_app: web.Application) -> web.Application:
    """The admin application; it reads and changes the state of `main_app`."""
    admin = web.Application(client_max_size=1024 * 1024,
                            middlewares=[json_errors, track_requests])
    admin[MAIN_APP_KEY] = main_app
    admin[METRICS_KEY] = main_app[METRICS_KEY]
    admin.router.add_get("/admin/routes", get_routes)
    admin.router.add_put("/admin/routes", put_routes)
    admin.router.add_post("/admin/swap", post_swap)
    admin.router.add_get("/admin/gate", get_gate)
    admin.router.add_get("/admin/stats", get_stats)
    admin.router.add_get("/admin/records", get_records)
    admin.router.add_get("/metrics", get_metrics)
    add_gate_hooks(admin, main_app)
    add_cutover_routes(admin, lambda request: _main(request).get(CUTOVER_KEY), _authorized)
    add_tune_routes(admin, lambda request: _main(request).get(TUNE_KEY), _authorized)
    return admin
