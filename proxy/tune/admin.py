"""The tune's admin endpoints, added to the proxy's admin app by `add_tune_routes`.

`GET /admin/tune` (status) is open like the gate and the cutover's status; starting a tune
and aborting one need the admin bearer token (the `authorize` the admin app passes in).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from proxy import adminhttp
from proxy.adminhttp import Authorize, json_answer, json_error, read_json
from proxy.tune.service import TuneRefused, TuneService
from proxy.tune.spec import TuneSpec

GetService = Callable[[web.Request], "TuneService | None"]
NOT_ENABLED = "tune is not enabled on this proxy"


def add_tune_routes(admin_app: web.Application, get_service: GetService,
                    authorize: Authorize) -> None:
    """Register `GET/POST /admin/tune` and `POST /admin/tune/abort`."""

    def service_or_error(request: web.Request, mutating: bool) -> TuneService | web.Response:
        return adminhttp.service_or_error(request, mutating, get_service, authorize,
                                          NOT_ENABLED)

    async def get_status(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=False)
        if isinstance(service, web.Response):
            return service
        return json_answer(service.status())

    async def post_start(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=True)
        if isinstance(service, web.Response):
            return service
        try:
            spec = TuneSpec.from_json(await read_json(request), service.base_criteria)
        except ValueError as exc:  # TuneSpecError included
            return json_error(400, str(exc))
        try:
            return json_answer(await service.start(spec), 201)
        except TuneRefused as exc:
            return json_error(exc.status, str(exc))

    async def post_abort(request: web.Request) -> web.StreamResponse:
        service = service_or_error(request, mutating=True)
        if isinstance(service, web.Response):
            return service
        try:
            return json_answer(await service.abort(), 202)
        except TuneRefused as exc:
            return json_error(exc.status, str(exc))

    admin_app.router.add_get("/admin/tune", get_status)
    admin_app.router.add_post("/admin/tune", post_start)
    admin_app.router.add_post("/admin/tune/abort", post_abort)
