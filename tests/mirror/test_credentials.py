"""Credentials in backend URLs: sent as Basic auth, kept in the state file, shown nowhere."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from proxy.mirror.config import ConfigError, RouteConfig, StoreConfig

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "pa55-w0rd"


def _with_user(url: str, user: str, password: str = SECRET) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()


def test_url_helpers() -> None:
    from proxy.credentials import basic_authorization, redact, without_credentials

    url = "http://alice:p%40ss@10.0.0.1:8000/v"
    assert without_credentials(url) == "http://10.0.0.1:8000/v"
    assert basic_authorization(url) == "Basic " + base64.b64encode(b"alice:p@ss").decode()
    assert basic_authorization("http://10.0.0.1:8000") is None
    assert redact(f"went to {url} and 'https://bob:x@h/'") == (
        "went to http://alice:***@10.0.0.1:8000/v and 'https://bob:***@h/'")
    with pytest.raises(ConfigError) as bad:
        RouteConfig(f"ftp://alice:{SECRET}@h:1")
    assert SECRET not in str(bad.value) and "alice:***@h:1" in str(bad.value)


def test_a_user_name_with_an_at_sign_keeps_the_password_hidden() -> None:
    from proxy.credentials import basic_authorization, redact, without_credentials
    from proxy.mirror.route_state import describe

    url = f"http://me@corp.example:{SECRET}@10.0.0.1:8000"
    assert without_credentials(url) == "http://10.0.0.1:8000"
    assert basic_authorization(url) == "Basic " + base64.b64encode(
        f"me@corp.example:{SECRET}".encode()).decode()
    assert redact(f"to {url} then") == "to http://me@corp.example:***@10.0.0.1:8000 then"
    assert SECRET not in describe(RouteConfig(url, url))
    with pytest.raises(ConfigError) as bad:
        RouteConfig(f"ftp://me@corp.example:{SECRET}@h:1")
    assert SECRET not in str(bad.value) and "me@corp.example:***@h:1" in str(bad.value)


def test_userinfo_without_a_password_is_hidden_whole() -> None:
    from proxy.credentials import redact

    # A token as the user part (http://TOKEN@host) is the secret itself.
    assert redact(f"to http://{SECRET}@10.0.0.1:8000/v1 then") == "to http://***@10.0.0.1:8000/v1 then"
    assert redact(f"'https://{SECRET}@h'") == "'https://***@h'"


@pytest.mark.parametrize("capture_worker", [False, True])
async def test_basic_auth_goes_upstream_and_the_password_nowhere_else(
        backend, proxy, admin, make_config, settle, tmp_path, caplog, capture_worker) -> None:
    caplog.set_level(logging.INFO)
    a, b = await backend(), await backend()
    a_auth, b_auth = _with_user(a.url, "old"), _with_user(b.url, "new")
    db = str(tmp_path / "records.db")
    config = dataclasses.replace(
        make_config(a.url, None, capture_worker=capture_worker, store=StoreConfig(db)),
        state_file=str(tmp_path / "state.json"))
    client = await proxy(config)
    api = await admin(client.app)
    put = await api.put("/admin/routes", json={"primary": a_auth, "shadow": b_auth},
                        headers=AUTH)
    assert put.status == 200, await put.text()
    resp = await client.post("/v1/completions", json={"prompt": "hi", "stream": True},
                             headers={"Authorization": "Bearer client-key"})
    assert resp.status == 200
    await resp.read()
    echo = await client.get("/echo/x")
    assert echo.status == 207
    swapped = await api.post("/admin/swap", headers=AUTH)  # credentials follow their URL
    assert swapped.status == 200
    await (await client.get("/echo/y")).read()
    if not capture_worker:
        await settle(client.app)
    for _ in range(100):
        if any(s.get("json") for s in b.seen) and len(b.seen) >= 2:
            break
        await asyncio.sleep(0.05)
    for fake, user in ((a, "old"), (b, "new")):
        expected = "Basic " + base64.b64encode(f"{user}:{SECRET}".encode()).decode()
        assert fake.seen, f"{user} backend got nothing"
        for seen in fake.seen:
            assert seen["headers"]["Authorization"] == expected
            assert seen["headers"]["Host"] == urlsplit(fake.url).netloc
    assert any(s.get("path") == "/echo/y" for s in b.seen)  # the swapped primary
    shown = [await (await api.get(path)).text() for path in
             ("/admin/routes", "/admin/stats", "/metrics")]
    shown.append(await put.text())
    shown.append(await (await api.get("/admin/records", headers=AUTH)).text())
    shown.append(caplog.text)
    for text in shown:
        assert SECRET not in text
    routes = await (await api.get("/admin/routes")).json()
    assert routes["primary"] == b.url and routes["shadow"] == a.url
    await client.close()
    with sqlite3.connect(db) as conn:
        backends = {row[0] for row in conn.execute("SELECT backend FROM capture")}
    assert backends and backends <= {urlsplit(a.url).netloc, urlsplit(b.url).netloc}
    state = str(tmp_path / "state.json")
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600
    saved = json.loads(Path(state).read_text(encoding="utf-8"))["routes"]
    assert (saved["primary"], saved["shadow"]) == (b_auth, a_auth)  # a restart keeps them


async def test_the_cutover_works_with_the_urls_as_configured(backend, proxy, make_config):
    from proxy.evidence.window import EvidenceWindow
    from proxy.mirror.app import CONTROL_KEY

    a, b = await backend(), await backend()
    b_auth = _with_user(b.url, "new")
    client = await proxy(make_config(a.url, None))
    control = client.app[CONTROL_KEY]
    view = control.set_routes(a.url, b_auth, None, None)
    # The cutover compares the routes with the URLs it was given and sets them back.
    assert (view.primary, view.shadow) == (a.url, b_auth)
    assert set(control.inflight()) == {a.url, b_auth}
    assert control.swap().primary == b_auth
    # Its evidence is matched against records, which name backends without credentials.
    assert EvidenceWindow(0.0, a.url, b_auth).new_url == b.url
