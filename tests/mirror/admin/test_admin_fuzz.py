"""Property-based tests of the admin API's JSON bodies (see tests/fuzzing.py).

Random JSON (and bytes that are not JSON) to `PUT /admin/routes`, `POST /admin/swap` and
the cutover's endpoints of a running proxy app: never a 500 (501 only for a container
cutover on a proxy without a Docker driver), every refusal a JSON error,
and routes refused stay exactly as they were.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from proxy.mirror.admin.api import build_admin_app
from proxy.mirror.app import build_app
from tests.fuzzing import fuzz_settings
from tests.mirror.conftest import TOKEN, _make_config

pytestmark = pytest.mark.fuzz
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
URLS = ["http://127.0.0.1:9", "http://u:p%40ss@127.0.0.1:9/v1", "https://[::1]:443", "http://",
        "ftp://h:1", "http://h:99999", "http://h:1/p?q=1", "http://h:1#f", "", " ", "x\ud800",
        "http://h:-1", "http://h:1:2", "http://user@h:1", "HTTP://H:1/"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
                    st.sampled_from(URLS))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6)
URL_OR_JSON = st.one_of(st.sampled_from(URLS), st.sampled_from(URLS), JSON)
# Mostly route-shaped objects, so that some are accepted and the rest refused for one reason.
ROUTE_BODIES = st.fixed_dictionaries({}, optional={
    "primary": URL_OR_JSON, "shadow": URL_OR_JSON, "baseline": URL_OR_JSON,
    "expect_version": st.one_of(st.integers(-1, 4), JSON)})
CUTOVER_KEYS = st.sampled_from(["old", "new_image", "new_url", "baseline_url", "min_samples",
                                "analysis_delay_s", "failure_limit", "force", "old_url"])
CUTOVER_BODIES = st.dictionaries(CUTOVER_KEYS, st.one_of(st.sampled_from(URLS), JSON),
                                 max_size=4)


PRIMARY, SHADOW = "http://127.0.0.1:9", "http://127.0.0.1:10"
START = {"primary": PRIMARY, "shadow": SHADOW, "baseline": None}


def _encoded(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()  # NaN and lone surrogates included, as a client may


Call = Callable[..., Awaitable[Any]]


@pytest.fixture
def admin_api() -> Iterator[tuple[Callable[[Awaitable[Any]], Any], TestClient]]:
    """An admin client of a started proxy app, on a loop the sync fuzz test drives."""
    loop = asyncio.new_event_loop()

    async def start() -> tuple[TestServer, TestClient]:
        main = build_app(_make_config(PRIMARY, SHADOW), CollectorRegistry())
        main_server = TestServer(main)
        await main_server.start_server()
        client = TestClient(TestServer(build_admin_app(main)))
        await client.start_server()
        return main_server, client

    main_server, client = loop.run_until_complete(start())
    yield loop.run_until_complete, client
    loop.run_until_complete(client.close())
    loop.run_until_complete(main_server.close())
    loop.close()


async def _send(client: TestClient, method: str, path: str, body: bytes
                ) -> tuple[int, Any]:
    resp = await client.request(method, path, data=body, headers=AUTH)
    text = await resp.text()
    # 501: a container cutover asked of a proxy without --driver docker (by design).
    assert resp.status < 500 or resp.status == 501, (method, path, body, resp.status, text)
    assert resp.content_type == "application/json", (path, body, text)
    data = json.loads(text)
    if resp.status >= 400:
        assert isinstance(data["error"]["message"], str), data
    return resp.status, data


async def _routes(client: TestClient) -> Any:
    return await (await client.get("/admin/routes")).json()


def test_route_changes_never_fail_inside_and_refusals_change_nothing(admin_api) -> None:
    run, client = admin_api
    bodies = st.one_of(ROUTE_BODIES, JSON, st.binary(max_size=12))

    @fuzz_settings(150)
    @given(body=bodies, swap=st.booleans())
    def check(body: Any, swap: bool) -> None:
        async def one() -> None:
            reset = await client.put("/admin/routes", headers=AUTH, json=START)
            assert reset.status == 200  # each example from the same routes: replayable alone
            before = await _routes(client)
            path, method = ("/admin/swap", "POST") if swap else ("/admin/routes", "PUT")
            status, _ = await _send(client, method, path, _encoded(body))
            after = await _routes(client)
            if status == 200:
                assert after["version"] == before["version"] + 1
            else:
                assert after == before, (body, status)
            assert ":p%40ss@" not in json.dumps(after) and "u:p" not in json.dumps(after)

        run(one())

    check()


def test_cutover_commands_never_fail_inside(admin_api) -> None:
    run, client = admin_api
    paths = st.sampled_from(["/admin/cutover", "/admin/cutover/promote",
                             "/admin/cutover/rollback", "/admin/cutover/abort"])

    @fuzz_settings(120)
    @given(path=paths, body=st.one_of(CUTOVER_BODIES, JSON, st.binary(max_size=12)))
    def check(path: str, body: Any) -> None:
        async def one() -> None:
            await _send(client, "POST", path, _encoded(body))
            status = await client.get("/admin/cutover")
            assert status.status == 200

        run(one())

    check()
