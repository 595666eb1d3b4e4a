"""The steady load's answer checks (pure), and one short run against a real sim server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.demo.steady import SteadyLoad, check_full, check_stream
from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig


def _sse(*events: object, done: bool = True) -> bytes:
    lines = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    if done:
        lines.append(b"data: [DONE]\n\n")
    return b"".join(lines)


def _chunk(finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "text": "x", "finish_reason": finish}]}


USAGE_4 = {"choices": [], "usage": {"completion_tokens": 4}}


def test_a_complete_stream_passes() -> None:
    raw = _sse(_chunk(), _chunk(), _chunk(), _chunk("length"), USAGE_4)
    assert check_stream(raw, 4) == (4, None)


def test_a_stream_without_done_is_cut_short() -> None:
    raw = _sse(_chunk(), _chunk("length"), USAGE_4, done=False)
    assert check_stream(raw, 4) == (None, "stream_without_done")


def test_a_stream_with_fewer_tokens_or_another_finish_is_short() -> None:
    short = _sse(_chunk("length"), {"choices": [], "usage": {"completion_tokens": 3}})
    assert check_stream(short, 4) == (3, "stream_short")
    stopped = _sse(_chunk("stop"), USAGE_4)
    assert check_stream(stopped, 4)[1] == "stream_short"
    assert check_stream(b"data: {oops\n\ndata: [DONE]\n\n", 4)[1] == "bad_event"


def test_unstreamed_answers() -> None:
    body = {"choices": [{"finish_reason": "length"}], "usage": {"completion_tokens": 4},
            "system_fingerprint": "vllm-x"}
    assert check_full(json.dumps(body).encode(), 4) == (4, None, "vllm-x")
    assert check_full(json.dumps(body).encode(), 5)[1] == "answer_short"
    assert check_full(b"<html>", 4)[1] == "bad_body"


async def test_a_short_run_against_a_sim_server_has_no_failure(aiohttp_server: Any) -> None:
    server = await aiohttp_server(make_sim_app(SimConfig(itl_ms=1.0)))
    sim_server_url = str(server.make_url("")).rstrip("/")
    stop = asyncio.Event()
    load = SteadyLoad(sim_server_url, "sim-model", clients=4, max_tokens=8)
    task = asyncio.create_task(load.run(stop))
    await asyncio.sleep(0.5)
    stop.set()
    result = await task
    assert result.outcomes and not result.failures
    assert {o.kind for o in result.outcomes} == {"chat", "completions"}
    assert {o.stream for o in result.outcomes} == {True, False}
    assert all(o.tokens == 8 for o in result.outcomes)
