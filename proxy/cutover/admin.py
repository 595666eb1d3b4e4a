"""The cutover's admin endpoints, added to the proxy's admin app by `add_cutover_routes`.

`GET /admin/cutover` (status) is open like the gate; starting a cutover and every operator
command need the admin bearer token, checked exactly as the proxy's other mutating
endpoints are (`proxy.mirror.admin.api._authorized`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.cutover.machine import CommandRefused
from proxy.cutover.model import Command
from proxy.cutover.service import CutoverService, StartRefused
from proxy.cutover.spec import CutoverSpec

GetService = Callable[[web.Request], "CutoverService | None"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NOT_ENABLED = "the cutover is not enabled on this proxy"


async def _body(request: web.Request) -> Any:
    """The JSON body (None when empty); ValueError quoting what was sent otherwise."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"body must be JSON, got {raw[:200]!r}") from None


def add_cutover_routes(admin_app: web.Application, get_service: GetService) -> None:
    """Register the cutover endpoints on the proxy's admin application."""
    # Imported here: proxy.mirror.admin.api imports this module to call this function.
    from proxy.mirror.admin import api as mirror_admin

    def service_or_error(request: web.Request, mutating: bool) -> CutoverService | web.Response:
        if mutating and (denied := mirror_admin._authorized(request)) is not None:
            return denied
        service = get_service(request)
        return mirror_admin._error(501, NOT_ENABLED) if service is None else service

    async def get_status(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=False)
        if isinstance(service, web.Response):
            return service
        return mirror_admin._json(service.status())

    async def post_start(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=True)
        if isinstance(service, web.Response):
            return service
        try:
            spec = CutoverSpec.from_json(await _body(request))
        except ValueError as exc:  # SpecError included
            return mirror_admin._error(400, str(exc))
        try:
            await service.start(spec)
        except StartRefused as exc:
            return mirror_admin._error(exc.status, str(exc))
        return mirror_admin._json(service.status(), 201)

    def command_handler(name: str) -> Handler:
        async def post_command(request: web.Request) -> web.StreamResponse:
            service = service_or_error(request, mutating=True)
            if isinstance(service, web.Response):
                return service
            cmd: Command = name  # type: ignore[assignment]
            try:
                body = await _body(request)
                if name == "promote":
                    cmd = "force_promote" if _force(body) else "promote"
                elif body not in (None, {}):
                    raise ValueError(f"{name} takes no body, got {body!r}")
            except ValueError as exc:
                return mirror_admin._error(400, str(exc))
            try:
                service.command(cmd)
            except CommandRefused as exc:
                return mirror_admin._error(409, str(exc))
            return mirror_admin._json(service.status(), 202)
        return post_command

    admin_app.router.add_get("/admin/cutover", get_status)
    admin_app.router.add_post("/admin/cutover", post_start)
    for name in ("promote", "rollback", "abort"):
        admin_app.router.add_post(f"/admin/cutover/{name}", command_handler(name))


def _force(body: Any) -> bool:
    if body is None:
        return False
    if not isinstance(body, dict) or set(body) - {"force"} or not isinstance(
            body.get("force", False), bool):
        raise ValueError(f'promote takes {{"force": true|false}}, got {body!r}')
    return bool(body.get("force", False))
