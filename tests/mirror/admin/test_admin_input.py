"""Hostile input to the admin listener, over a real socket: header bytes that are not
UTF-8, JSON nested 200,000 deep, wrong methods, a Flagger body carrying its token. Each
is a JSON 4xx, never a 500 or a traceback, and no token is echoed back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from proxy.mirror.admin.api import build_admin_app
from proxy.mirror.app import build_app
from tests.mirror.conftest import TOKEN, _make_config

DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.fixture
async def admin_port() -> AsyncIterator[int]:
    main = build_app(_make_config("http://127.0.0.1:9", "http://127.0.0.1:10"),
                     CollectorRegistry())
    main_server = TestServer(main)
    await main_server.start_server()
    admin = TestServer(build_admin_app(main))
    await admin.start_server()
    assert admin.port is not None
    yield admin.port
    await admin.close()
    await main_server.close()


async def _raw(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """One request as bytes on a socket (a client library would refuse to send these)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                 + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    header, _, payload = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, payload


def _json_error(status: int, headers: dict[str, str], body: bytes, expected: int) -> Any:
    assert status == expected, (status, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    data = json.loads(body)
    assert isinstance(data["error"]["message"], str) and b"Traceback" not in body
    return data


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", "/admin/routes"), ("POST", "/admin/cutover"), ("GET", "/admin/gate/analysis"),
    ("POST", "/admin/cutover/abort"), ("POST", "/admin/gate/flagger")])
async def test_a_bearer_value_that_is_not_utf8_is_a_401(admin_port: int, method: str,
                                                        path: str) -> None:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n".encode() + \
        b"Authorization: Bearer \xff\xfe\r\n"
    body = b'{"name": "a", "namespace": "b"}' if "flagger" in path else b""
    _json_error(*await _raw(admin_port, head, body), 401)


@pytest.mark.parametrize("path", ["/admin/routes", "/admin/cutover", "/admin/gate/flagger"])
async def test_json_nested_200000_deep_is_a_400(admin_port: int, path: str) -> None:
    method = "PUT" if path == "/admin/routes" else "POST"
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\n").encode()
    data = _json_error(*await _raw(admin_port, head, DEEP), 400)
    assert "nested deeper than" in data["error"]["message"]


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/admin/routes", "PUT"), ("GET", "/admin/swap", "POST"),
    ("PUT", "/admin/cutover", "POST"), ("GET", "/admin/cutover/abort", "POST"),
    ("DELETE", "/admin/gate/flagger", "POST")])
async def test_a_wrong_method_is_a_json_405_with_allow(admin_port: int, method: str,
                                                       path: str, allowed: str) -> None:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n".encode()
    status, headers, body = await _raw(admin_port, head)
    data = _json_error(status, headers, body, 405)
    assert method in data["error"]["message"] and allowed in headers["allow"]


async def test_an_unknown_path_is_a_json_404(admin_port: int) -> None:
    _json_error(*await _raw(admin_port, b"GET /admin/nope HTTP/1.1\r\nHost: x\r\n"), 404)


@pytest.mark.parametrize("body", [
    {"metadata": {"token": "s3cret-gate-token"}},
    {"name": "a", "namespace": "b", "metadata": {"token": "s3cret-gate-token", "n": 1}},
    {"name": "a", "namespace": "b", "metadata": ["s3cret-gate-token"]}])
async def test_a_malformed_flagger_body_is_never_echoed(admin_port: int,
                                                        body: dict[str, Any]) -> None:
    head = b"POST /admin/gate/flagger HTTP/1.1\r\nHost: x\r\n"
    status, headers, payload = await _raw(admin_port, head, json.dumps(body).encode())
    _json_error(status, headers, payload, 400)
    assert b"s3cret" not in payload


async def _put_routes(port: int, body: dict[str, Any]) -> tuple[int, Any]:
    head = (f"PUT /admin/routes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\n").encode()
    status, _, payload = await _raw(port, head, json.dumps(body).encode())
    return status, json.loads(payload)


async def test_routes_whose_evidence_means_nothing_are_refused(admin_port: int) -> None:
    _, before = await _put_routes(admin_port, {"expect_version": 999})
    status, answer = await _put_routes(admin_port, {"shadow": "http://localhost:9"})
    assert status == 400 and "is the primary 'http://127.0.0.1:9'" in answer["error"]["message"]
    status, answer = await _put_routes(admin_port, {"baseline": "http://LOCALHOST:10/"})
    assert status == 400 and "is the shadow (new)" in answer["error"]["message"]
    head = b"GET /admin/routes HTTP/1.1\r\nHost: x\r\n"
    routes = json.loads((await _raw(admin_port, head))[2])
    assert routes["shadow"] == "http://127.0.0.1:10" and routes["baseline"] is None
    status, answer = await _put_routes(admin_port, {"baseline": "http://localhost:9"})
    assert status == 200 and "within one engine" in answer["warnings"][0]
    assert before["error"]  # the 409 of a stale version, not a change
