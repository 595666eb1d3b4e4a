"""Routes through the admin API: compare-and-set, bad values, a primary alone, in flight."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.mirror.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}


async def test_two_writers_one_loses_with_the_current_routes(backend, proxy, admin,
                                                             make_config):
    a, b, c, d = await backend(), await backend(), await backend(), await backend()
    client = await proxy(make_config(a.url, b.url))
    api = await admin(client.app)
    read = await api.get("/admin/routes")
    assert read.headers["ETag"] == '"1"'
    first, second = await asyncio.gather(
        api.put("/admin/routes", json={"shadow": c.url, "expect_version": 1}, headers=AUTH),
        api.put("/admin/routes", json={"shadow": d.url},
                headers={**AUTH, "If-Match": read.headers["ETag"]}))
    answers = {first.status: await first.json(), second.status: await second.json()}
    assert sorted(answers) == [200, 409]
    won, lost = answers[200], answers[409]
    assert won["version"] == 2 and won["shadow"] in (c.url, d.url)
    assert lost["routes"] == won  # the loser sees what it would have overwritten
    assert "version 2, not 1" in lost["error"]["message"]
    assert await (await api.get("/admin/routes")).json() == won
    stale_swap = await api.post("/admin/swap", json={"expect_version": 1}, headers=AUTH)
    assert stale_swap.status == 409
    swapped = await api.post("/admin/swap", headers={**AUTH, "If-Match": '"2"'})
    assert (await swapped.json())["primary"] == won["shadow"]
    unconditional = await api.put("/admin/routes", json={"baseline": b.url}, headers=AUTH)
    assert (await unconditional.json())["version"] == 4


@pytest.mark.parametrize(("body", "headers", "quoted"), [
    ({"primary": None}, {}, "None"),
    ({"primary": 8000}, {}, "8000"),
    ({"shadow": ["http://x:1"]}, {}, "['http://x:1']"),
    ({"baseline": {"url": "http://x:1"}}, {}, "{'url': 'http://x:1'}"),
    ([1, 2], {}, "[1, 2]"),
    ("http://x:1", {}, "'http://x:1'"),
    ({"expect_version": "1"}, {}, "'1'"),
    ({"expect_version": True}, {}, "True"),
    ({"shadow": None}, {"If-Match": "v1"}, "'v1'"),
    ({"shadow": None, "expect_version": 1}, {"If-Match": "2"}, "disagree"),
])
async def test_bad_values_are_400_quoting_them(backend, proxy, admin, make_config, body,
                                               headers, quoted):
    a, b = await backend(), await backend()
    client = await proxy(make_config(a.url, b.url))
    api = await admin(client.app)
    resp = await api.put("/admin/routes", data=json.dumps(body),
                         headers={**AUTH, **headers, "Content-Type": "application/json"})
    assert resp.status == 400
    assert quoted in (await resp.json())["error"]["message"]
    assert (await (await api.get("/admin/routes")).json())["version"] == 1
    broken = await api.put("/admin/routes", data="{", headers=AUTH)
    assert broken.status == 400


@pytest.mark.parametrize("capture_worker", [False, True])
async def test_primary_alone_serves_then_takes_a_shadow(backend, proxy, admin, make_config,
                                                        capture_worker):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, None, capture_worker=capture_worker))
    api = await admin(client.app)
    for path in ("/v1/completions", "/v1/chat/completions"):
        body = await (await client.post(path, json=GREEDY)).read()
        assert body.endswith(b"data: [DONE]\n\n")
    assert len(primary.seen) == 2
    stats = await (await api.get("/admin/stats")).json()
    assert stats["records"] == 0 and stats["live"]["routes"]["shadow"] is None
    assert stats["live"]["inflight"] == {primary.url: {"primary": 0, "mirror": 0}}
    gate = await api.get("/admin/gate")
    assert gate.status == 409 and (await gate.json())["verdict"] == "inconclusive"
    assert (await api.get("/metrics")).status == 200
    assert (await api.post("/admin/swap", headers=AUTH)).status == 409
    added = await api.put("/admin/routes", json={"shadow": shadow.url, "expect_version": 1},
                          headers=AUTH)
    assert added.status == 200
    await (await client.post("/v1/completions", json=GREEDY)).read()
    for _ in range(400):
        stats = await (await api.get("/admin/stats")).json()
        if stats["records"] == 1:
            break
        await asyncio.sleep(0.05)
    assert stats["records"] == 1 and stats["shadow"]["compared"] == 1
    assert len(shadow.seen) == 1


async def test_in_flight_per_backend_until_the_last_byte(backend, proxy, admin, make_config,
                                                         settle):
    release_primary, release_shadow = asyncio.Event(), asyncio.Event()
    primary = await backend(gate=release_primary)
    shadow = await backend(gate=release_shadow)
    client = await proxy(make_config(primary.url, shadow.url))
    api = await admin(client.app)

    async def inflight() -> dict[str, dict[str, int]]:
        return dict((await (await api.get("/admin/stats")).json())["live"]["inflight"])

    resp = await client.post("/v1/completions", json=GREEDY)
    await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)  # mid-stream
    now = await inflight()
    assert now[primary.url]["primary"] == 1
    assert now[shadow.url] == {"primary": 0, "mirror": 1}
    release_primary.set()
    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    now = await inflight()
    assert now[primary.url]["primary"] == 0  # relayed to its last byte
    assert now[shadow.url]["mirror"] == 1  # the mirror still streams
    release_shadow.set()
    await settle(client.app)
    assert await inflight() == {primary.url: {"primary": 0, "mirror": 0},
                                shadow.url: {"primary": 0, "mirror": 0}}
