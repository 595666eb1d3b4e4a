"""The verdict gauge follows the evidence without anyone calling /admin/gate."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from proxy.metrics import ProxyMetrics
from proxy.mirror.app import METRICS_KEY
from tests.gate_helpers import tokens_only


async def test_refresher_sets_verdict_gauge(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend(words=["Other"] * 4)
    criteria = tokens_only(min_samples=3, min_match_rate=0.5)
    config = replace(make_config(primary.url, shadow.url, gate=criteria), gate_refresh_s=0.05)
    client = await proxy(config)
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.verdict.labels("inconclusive")._value.get() == 1.0
    for _ in range(6):
        body = {"prompt": "x", "stream": True, "temperature": 0}
        await (await client.post("/v1/completions", json=body)).read()
    await settle(client.app)
    for _ in range(100):
        if metrics.verdict.labels("fail")._value.get() == 1.0:
            break
        await asyncio.sleep(0.05)
    assert metrics.verdict.labels("fail")._value.get() == 1.0
    assert metrics.verdict.labels("inconclusive")._value.get() == 0.0
