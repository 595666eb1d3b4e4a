"""Routes change at run time; requests in flight finish where they started."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.mirror.app import ROUTER_KEY
from proxy.mirror.config import RouteConfig
from proxy.mirror.upstream.routing import Router


class FakeSession:
    def __init__(self, lane: str, url: str) -> None:
        self.lane, self.url, self.closed = lane, url, False

    async def close(self) -> None:
        self.closed = True


def _router() -> Router:
    return Router(RouteConfig("http://a:1", "http://b:2"), FakeSession)  # type: ignore[arg-type]


async def test_swap_and_lanes_are_separate_pools():
    router = _router()
    old = router.routes
    assert old.primary.lane == "primary" and old.shadow is not None
    assert old.shadow.lane == "mirror"
    new = router.swap()
    assert (new.version, new.primary.url, new.shadow.url) == (2, "http://b:2", "http://a:1")
    assert new.primary.pool is not old.shadow.pool  # primary never shares a mirror pool
    await asyncio.sleep(0)
    assert old.primary.pool.closed and old.shadow.pool.closed  # idle: closed at once


async def test_pool_in_use_closes_only_after_last_request():
    router = _router()
    held = router.routes.primary.acquire()
    router.replace(RouteConfig("http://c:3"))
    await asyncio.sleep(0)
    assert not held.pool.closed
    held.release()
    await asyncio.sleep(0)
    assert held.pool.closed
    assert router.routes.shadow is None


async def test_swap_back_reuses_a_draining_pool():
    router = _router()
    held = router.routes.primary.acquire()
    router.swap()
    router.swap()
    assert router.routes.primary is held  # became active again before it drained
    held.release()
    await asyncio.sleep(0)
    assert not held.pool.closed
    await router.close()
    assert held.pool.closed


def test_swap_without_shadow_refused():
    router = Router(RouteConfig("http://a:1"), FakeSession)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no shadow"):
        router.swap()


async def test_swap_while_streams_in_flight(backend, proxy, make_config, settle):
    release = asyncio.Event()
    a = await backend(gate=release)
    b = await backend()
    client = await proxy(make_config(a.url, b.url))
    body = {"prompt": "x", "stream": True, "temperature": 0}

    async def stream() -> tuple[int, bytes]:
        resp = await client.post("/v1/completions", json=body)
        return resp.status, await resp.read()

    old = [asyncio.ensure_future(stream()) for _ in range(8)]
    for _ in range(500):
        if len(a.seen) == 8:
            break
        await asyncio.sleep(0.01)
    assert len(a.seen) == 8
    client.app[ROUTER_KEY].swap()
    new = [await stream() for _ in range(4)]  # served by b while a still holds the old ones
    release.set()
    results: list[Any] = await asyncio.gather(*old)
    expected = b"".join(a._chunk(i, w, False, False) for i, w in enumerate(a.words))
    expected += b"data: [DONE]\n\n"
    assert all(r == (200, expected) for r in results + new)
    primary_on_b = [s for s in b.seen if "return_token_ids" not in s["json"]]
    mirrored_on_a = [s for s in a.seen if s["json"].get("return_token_ids")]
    assert len(primary_on_b) == 4 and len(mirrored_on_a) == 4
    await settle(client.app)
