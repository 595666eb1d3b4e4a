"""The real server: both listeners on sockets, graceful shutdown drains requests in flight."""

from __future__ import annotations

import asyncio

import aiohttp

from proxy.mirror.config import AdminConfig, ProxyConfig, RouteConfig
from proxy.mirror.server import serve


async def test_stop_drains_in_flight_stream(backend):
    release = asyncio.Event()
    primary = await backend(gate=release)
    shadow = await backend()
    config = ProxyConfig(routes=RouteConfig(primary.url, shadow.url), host="127.0.0.1", port=0,
                         admin=AdminConfig(port=0, token="t0ken-t0ken"), drain_timeout_s=5.0)
    stop = asyncio.Event()
    ports: list[tuple[int, int | None]] = []
    server = asyncio.ensure_future(serve(config, stop, lambda p, a: ports.append((p, a))))
    for _ in range(6000):  # the capture worker's start: seconds on a loaded 2-core machine
        if ports or server.done():
            break
        await asyncio.sleep(0.01)
    port, admin_port = ports[0]
    async with aiohttp.ClientSession() as session:
        gate = await session.get(f"http://127.0.0.1:{admin_port}/admin/gate")
        assert gate.status == 409  # no evidence yet: not a pass
        resp = await session.post(f"http://127.0.0.1:{port}/v1/completions",
                                  json={"prompt": "x", "stream": True, "temperature": 0})
        await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
        stop.set()
        await asyncio.sleep(0.2)
        assert not server.done()  # still draining the open stream
        release.set()
        body = await resp.read()
    assert body.endswith(b"data: [DONE]\n\n")
    await asyncio.wait_for(server, 10)
