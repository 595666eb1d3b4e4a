"""The cutover's admin endpoints over HTTP: token, status codes, quoted bad values."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from proxy.adminhttp import authorize, json_errors
from proxy.cutover.control import GateView
from proxy.cutover.shell.admin import add_cutover_routes
from proxy.cutover.shell.service import CutoverService
from proxy.mirror.admin.api import MAIN_APP_KEY
from proxy.mirror.app import CONFIG_KEY
from proxy.mirror.config import AdminConfig, ProxyConfig, RouteConfig
from tests.cutover.world import FAST, World, until

TOKEN = "t0ken-for-cutover"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _api(aiohttp_client: Any, service: CutoverService | None, token: str | None = TOKEN
               ) -> Any:
    main = web.Application()
    main[CONFIG_KEY] = ProxyConfig(routes=RouteConfig("http://old:8000"),
                                   admin=AdminConfig(token=token))
    admin = web.Application(middlewares=[json_errors])
    admin[MAIN_APP_KEY] = main
    add_cutover_routes(admin, lambda request: service,
                       lambda request: authorize(request, token))
    return await aiohttp_client(admin)


@pytest.mark.parametrize(("path", "headers"), [
    ("/admin/cutover", {}), ("/admin/cutover", {"Authorization": "Bearer nope"}),
    ("/admin/cutover/promote", {}), ("/admin/cutover/rollback", {"Authorization": TOKEN}),
    ("/admin/cutover/abort", {"Authorization": "Basic " + TOKEN})])
async def test_mutating_endpoints_need_the_token(world: World, aiohttp_client, path,
                                                 headers) -> None:
    api = await _api(aiohttp_client, await world.service())
    resp = await api.post(path, json=FAST, headers=headers)
    assert resp.status == 401
    assert (await api.get("/admin/cutover")).status == 200  # status is open
    assert world.control.changes == [] and not world.driver.calls


async def test_no_token_configured_disables_them(world: World, aiohttp_client) -> None:
    api = await _api(aiohttp_client, await world.service(), token=None)
    resp = await api.post("/admin/cutover", json=FAST, headers=AUTH)
    assert resp.status == 401 and "no admin token" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize(("body", "quoted"), [
    (b"{not json", "body must be JSON (Expecting property name"),
    (b'{"old": "vllm-old", "new_image": "vllm:new", "min_samples": "many"}',
     "min_samples must be an integer of at most 64 bits, got 'many'"),
    (b'{"old": "vllm-old", "new_image": "vllm:new", "speed": 3}', "unknown field(s) ['speed']"),
    (b"", "a JSON object, got None"),
])
async def test_bad_start_bodies_are_400_with_the_value(world: World, aiohttp_client, body,
                                                       quoted) -> None:
    api = await _api(aiohttp_client, await world.service())
    resp = await api.post("/admin/cutover", data=body, headers=AUTH)
    assert resp.status == 400 and quoted in (await resp.json())["error"]["message"]


async def test_start_status_commands_and_conflicts(world: World, aiohttp_client) -> None:
    world.control.judge = lambda w: GateView("inconclusive", ("3 < 10 samples",), 3, 10)
    service = await world.service()
    api = await _api(aiohttp_client, service)
    before = await (await api.get("/admin/cutover")).json()
    assert before["phase"] is None and before["primary"]["url"] == world.old_url
    resp = await api.post("/admin/cutover", json={**FAST, "auto_promote": False}, headers=AUTH)
    assert resp.status == 201
    started = await resp.json()
    assert started["phase"] == "starting_new" and started["old"]["container"]
    again = await api.post("/admin/cutover", json=FAST, headers=AUTH)
    assert again.status == 409 and "is still" in (await again.json())["error"]["message"]
    await until(lambda: service.state is not None and service.state.samples == 3)
    refused = await api.post("/admin/cutover/promote", headers=AUTH)
    message = (await refused.json())["error"]["message"]
    assert refused.status == 409 and "inconclusive, 3/10 samples" in message and "--force" in message
    wrong = await api.post("/admin/cutover/rollback", headers=AUTH)
    assert wrong.status == 409 and "abort it instead" in (await wrong.json())["error"]["message"]
    bad = await api.post("/admin/cutover/promote", json={"force": "yes"}, headers=AUTH)
    assert bad.status == 400 and "'yes'" in (await bad.json())["error"]["message"]
    forced = await api.post("/admin/cutover/promote", json={"force": True}, headers=AUTH)
    assert forced.status == 202 and (await forced.json())["pending"] == "force_promote"
    await until(lambda: service.state is not None and service.state.phase.promoted)
    status = await (await api.get("/admin/cutover")).json()
    assert status["primary"]["version"] == "new" and status["shadow"]["version"] == "old"
    late = await api.post("/admin/cutover/abort", headers=AUTH)
    assert late.status == 409 and "roll back instead" in (await late.json())["error"]["message"]
    assert (await api.post("/admin/cutover/rollback", headers=AUTH)).status == 202
    end = await service.wait()
    assert end is not None and end.phase.value == "rolled_back"


async def test_no_driver_and_no_service_answer_501(world: World, aiohttp_client) -> None:
    api = await _api(aiohttp_client, await world.service(driver=False))
    resp = await api.post("/admin/cutover", json=FAST, headers=AUTH)
    assert resp.status == 501 and "--driver docker" in (await resp.json())["error"]["message"]
    none = await _api(aiohttp_client, None)
    assert (await none.get("/admin/cutover")).status == 501
    assert (await none.post("/admin/cutover/abort", headers=AUTH)).status == 501


async def test_cli_drives_a_cutover_through_these_endpoints(world: World, aiohttp_server,
                                                            capsys) -> None:
    import asyncio
    import json

    from proxy.cli import main

    main_app = web.Application()
    main_app[CONFIG_KEY] = ProxyConfig(routes=RouteConfig(world.old_url),
                                       admin=AdminConfig(token=TOKEN))
    admin = web.Application()
    admin[MAIN_APP_KEY] = main_app
    service = await world.service()
    add_cutover_routes(admin, lambda request: service,
                       lambda request: authorize(request, TOKEN))
    url = str((await aiohttp_server(admin)).make_url("")).rstrip("/")
    common = ["--proxy-admin", url, "--admin-token", TOKEN, "--interval", "0.01"]
    argv = ["cutover", "start", *common, "--old", "vllm-old", "--new-image", "vllm:new",
            "--min-samples", "10", "--post-promotion", "0.05", "--scale-down-delay", "0",
            "--wait"]
    assert await asyncio.to_thread(main, argv) == 0
    out = capsys.readouterr().out
    assert "shadowing -> promoting" in out and "draining_old -> done" in out
    assert await asyncio.to_thread(main, ["cutover", "status", "--json", *common]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "done" and status["primary"]["version"] == "new"
    assert status["shadow"] is None
    assert await asyncio.to_thread(main, ["cutover", "rollback", "--wait", *common]) == 0
    assert "done -> rolling_back" in capsys.readouterr().out
    assert world.control.view.primary == world.old_url


async def test_container_log_lines_are_shown_to_token_holders_only(world: World,
                                                                   aiohttp_client) -> None:
    """vLLM with --enable-log-requests logs prompts: a failed new container's log tail
    is kept without its request lines, and shown only with the admin token."""
    world.driver.create_state = "exited"
    world.driver.logs = ("INFO Started server process\n"
                         'INFO Received request cmpl-1: prompt: \'secret user prompt s4\'\n'
                         "ERROR CUDA out of memory")
    service = await world.service()
    api = await _api(aiohttp_client, service)
    assert (await api.post("/admin/cutover", json=FAST, headers=AUTH)).status in (200, 201, 202)
    await until(lambda: service.status()["terminal"] is True)
    open_answer = await (await api.get("/admin/cutover")).text()
    assert "secret" not in open_answer and "CUDA out of memory" not in open_answer
    assert '"log_tail": null' in open_answer and "admin token" in open_answer
    with_token = await (await api.get("/admin/cutover", headers=AUTH)).json()
    assert "CUDA out of memory" in with_token["log_tail"]
    assert "secret" not in with_token["log_tail"] and "1 line(s) about requests" in \
        with_token["log_tail"]
