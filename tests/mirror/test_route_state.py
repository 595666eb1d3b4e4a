"""Routes in the state file: written on every change, restored over the command line."""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import replace

import pytest

from proxy.mirror.config import ConfigError, RouteConfig
from proxy.mirror.route_state import restore_routes, routes_from_json
from proxy.statefile import StateFile, StateFileError

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_routes_from_json_checks_types():
    base = RouteConfig("http://a:1", "http://b:1")
    assert routes_from_json({"shadow": None}, base) == RouteConfig("http://a:1")
    assert routes_from_json({"primary": "http://c:1/"}) == RouteConfig("http://c:1")
    for bad, quoted in (({"primary": None}, "None"), ({"shadow": 1}, "1"),
                        ({"baseline": [None]}, "[None]")):
        with pytest.raises(ConfigError, match=re.escape(f"got {quoted}")):
            routes_from_json(bad, base)
    with pytest.raises(ConfigError, match="need a primary"):
        routes_from_json({"shadow": "http://b:1"})


@pytest.mark.parametrize("section", [
    {"primary": "http://a:1"}, {"version": "2", "primary": "http://a:1"},
    {"version": 2, "primary": 7}, ["http://a:1"]])
def test_a_bad_routes_section_is_refused_quoting_it(tmp_path, section):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"routes": section}))
    with pytest.raises(StateFileError, match=re.escape(str(path))):
        restore_routes(StateFile(str(path)), RouteConfig("http://a:1"), reset=False)


async def test_changes_persist_and_win_at_the_next_start(backend, proxy, admin, make_config,
                                                         tmp_path, caplog):
    old, new = await backend(), await backend()
    path = tmp_path / "proxy.state.json"
    config = replace(make_config(old.url, None), state_file=str(path))
    first = await proxy(config)
    assert json.loads(path.read_text())["routes"]["version"] == 1  # written at start
    api = await admin(first.app)
    put = await api.put("/admin/routes", json={"primary": new.url, "shadow": old.url},
                        headers=AUTH)
    assert put.status == 200
    saved = json.loads(path.read_text())["routes"]
    assert (saved["version"], saved["primary"], saved["shadow"]) == (2, new.url, old.url)
    await first.close()

    caplog.set_level(logging.WARNING)
    again = await proxy(config)  # the original --primary, as a restart would pass it
    routes = await (await (await admin(again.app)).get("/admin/routes")).json()
    assert (routes["version"], routes["primary"], routes["shadow"]) == (2, new.url, old.url)
    await (await again.get("/echo/x")).read()
    assert len(new.seen) == 1 and not old.seen
    warning = next(r.getMessage() for r in caplog.records if "restored" in r.getMessage())
    assert f"primary={new.url}" in warning and f"primary={old.url}" in warning
    assert "--reset-routes" in warning
    await again.close()

    reset = await proxy(replace(config, reset_routes=True))
    routes = await (await (await admin(reset.app)).get("/admin/routes")).json()
    assert (routes["version"], routes["primary"], routes["shadow"]) == (3, old.url, None)
    assert json.loads(path.read_text())["routes"]["primary"] == old.url


async def test_unwritable_state_leaves_the_routes_as_they_were(backend, proxy, admin,
                                                               make_config, tmp_path):
    a, b = await backend(), await backend()
    folder = tmp_path / "state"
    folder.mkdir()
    config = replace(make_config(a.url, b.url), state_file=str(folder / "s.json"))
    api = await admin((await proxy(config)).app)
    shutil.rmtree(folder)
    resp = await api.put("/admin/routes", json={"shadow": None}, headers=AUTH)
    assert resp.status == 503 and "state file" in (await resp.json())["error"]["message"]
    routes = await (await api.get("/admin/routes")).json()
    assert (routes["version"], routes["shadow"]) == (1, b.url)
    assert (await api.post("/admin/swap", headers=AUTH)).status == 503


async def test_an_unreadable_state_file_stops_the_start(backend, proxy, make_config, tmp_path):
    primary = await backend()
    path = tmp_path / "s.json"
    path.write_text('{"routes": {"version": 1, "prim')
    with pytest.raises(StateFileError, match="cannot be read"):
        await proxy(replace(make_config(primary.url, None), state_file=str(path)))
