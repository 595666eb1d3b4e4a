"""The cutover's admin endpoints, added to the proxy's admin app by `add_cutover_routes`.

`GET /admin/cutover` (status) is open like the gate; starting a cutover and every operator
command need the admin bearer token, checked by the `authorize` the proxy's admin app
passes in (the same check as its other mutating endpoints). Answers and errors are the
shared admin JSON (`proxy.adminhttp`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy import adminhttp
from proxy.adminhttp import Authorize, json_answer, json_error, read_json
from proxy.cutover.machine import CommandRefused
from proxy.cutover.model import Command
from proxy.cutover.shell.service import CutoverService, StartRefused
from proxy.cutover.spec import CutoverSpec

GetService = Callable[[web.Request], "CutoverService | None"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NOT_ENABLED = "the cutover is not enabled on this proxy"


def add_cutover_routes(admin_app: web.Application, get_service: GetService,
                       authorize: Authorize) -> None:
    """Register the cutover endpoints on the proxy's admin application; `authorize` is its
    admin-token check (None: allowed, else the 401 to send)."""

    def service_or_error(request: web.Request, mutating: bool) -> CutoverService | web.Response:
        return adminhttp.service_or_error(request, mutating, get_service, authorize,
                                          NOT_ENABLED)

    async def get_status(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=False)
        if isinstance(service, web.Response):
            return service
        status = service.status()
        if status.get("log_tail") and authorize(request) is not None:
            # Container log lines may carry client data: shown to token holders only.
            status["log_tail"] = None
            status["log_tail_hidden"] = "container log lines: GET with the admin token"
        return json_answer(status)

    async def post_start(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=True)
        if isinstance(service, web.Response):
            return service
        try:
            spec = CutoverSpec.from_json(await read_json(request))
        except ValueError as exc:  # SpecError included
            return json_error(400, str(exc))
        try:
            await service.start(spec)
        except StartRefused as exc:
            return json_error(exc.status, str(exc))
        return json_answer(service.status(), 201)

    def command_handler(name: str) -> Handler:
        async def post_command(request: web.Request) -> web.StreamResponse:
            service = service_or_error(request, mutating=True)
            if isinstance(service, web.Response):
                return service
            cmd: Command = name  # type: ignore[assignment]
            try:
                body = await read_json(request)
                if name == "promote":
                    cmd = "force_promote" if _force(body) else "promote"
                elif body not in (None, {}):
                    raise ValueError(f"{name} takes no body, got {body!r}")
            except ValueError as exc:
                return json_error(400, str(exc))
            try:
                service.command(cmd)
            except CommandRefused as exc:
                return json_error(409, str(exc))
            return json_answer(service.status(), 202)
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
