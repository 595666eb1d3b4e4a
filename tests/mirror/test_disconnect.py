"""A client that goes away mid-stream cancels the primary and the shadow at once."""

from __future__ import annotations

import asyncio

from proxy.metrics import ProxyMetrics
from proxy.mirror.app import METRICS_KEY, STORE_KEY


async def test_client_disconnect_cancels_upstreams(backend, proxy, make_config, settle):
    held = asyncio.Event()  # never set: both backends hang after their first chunk
    primary = await backend(gate=held)
    shadow = await backend(gate=held)
    client = await proxy(make_config(primary.url, shadow.url))
    resp = await client.post("/v1/completions",
                             json={"prompt": "x", "stream": True, "temperature": 0})
    await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    resp.connection.transport.abort()  # the client vanishes
    await asyncio.wait_for(primary.cancelled.wait(), 5)
    await asyncio.wait_for(shadow.cancelled.wait(), 5)
    await settle(client.app)
    (record,) = await client.app[STORE_KEY].call(lambda s: list(s.records()))
    assert {c.role: c.cancelled for c in record.captures} == {"primary": True, "shadow": True}
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.cancelled._value.get() == 1


async def test_client_disconnect_before_first_byte_cancels_primary(backend, proxy, make_config,
                                                                   settle, dead_url):
    primary = await backend(ttft_s=30.0, mode="slow_headers")  # long "prefill"
    client = await proxy(make_config(primary.url, dead_url()))
    task = asyncio.ensure_future(client.post(
        "/v1/completions", json={"prompt": "x", "stream": True, "temperature": 0}))
    for _ in range(200):
        if primary.seen:
            break
        await asyncio.sleep(0.01)
    assert primary.seen, "request never reached the primary"
    task.cancel()  # closes the client connection while nothing was written yet
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(primary.cancelled.wait(), 5)
    await settle(client.app)
