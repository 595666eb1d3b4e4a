"""An unstreamed answer from the sim as a vLLM gives it: the whole generation's time (TTFT
plus one ITL per further token) before the body, and `usage.completion_tokens`."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig


async def test_an_unstreamed_answer_takes_the_generation_time_and_counts_its_tokens(
    aiohttp_client: Any,
) -> None:
    client = await aiohttp_client(make_sim_app(SimConfig(ttft_ms=40, itl_ms=10)))
    loop = asyncio.get_running_loop()
    for endpoint, body in (("completions", {"prompt": "a"}),
                           ("chat/completions", {"messages": [{"role": "user", "content": "a"}]})):
        for tokens in (3, 21):
            start = loop.time()
            resp = await client.post(f"/v1/{endpoint}", json={
                **body, "max_tokens": tokens, "temperature": 0, "ignore_eos": True})
            answer = await resp.json()
            e2e_s = loop.time() - start
            assert resp.status == 200 and answer["usage"]["completion_tokens"] == tokens
            due_s = 0.040 + (tokens - 1) * 0.010
            assert due_s - 0.005 <= e2e_s < due_s + 1.0, (endpoint, tokens, e2e_s)
