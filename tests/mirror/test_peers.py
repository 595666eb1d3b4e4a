"""Each new mirror connection is confirmed before a prompt goes on it (`proxy.mirror.peers`),
in process and through the capture worker; the primary lane is never asked."""

from __future__ import annotations

import asyncio

import pytest

from proxy.mirror.app import PEERS_KEY
from proxy.mirror.peers import NOT_BOUND, PeerGuard
from tests.mirror.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}


async def test_an_unbound_guard_refuses_every_peer():
    guard = PeerGuard()
    assert await guard.confirm("http://10.0.0.5:8000") == NOT_BOUND

    async def only_old(url: str) -> str | None:
        return None if url == "http://old:8000" else f"{url} is not old"

    guard.bind(only_old)
    assert await guard.confirm("http://old:8000") is None
    assert await guard.confirm("http://x:8000") == "http://x:8000 is not old"


async def _shadow_errors(api, n: int) -> list[str | None]:  # type: ignore[no-untyped-def]
    """The shadow captures' errors of the first `n` records, once they are written."""
    for _ in range(400):
        records = (await (await api.get("/admin/records", headers=AUTH)).json())["records"]
        if len(records) >= n:
            return [next(c["error"] for c in r["captures"] if c["role"] == "shadow")
                    for r in records[:n]]
        await asyncio.sleep(0.05)
    raise AssertionError("the records were never written")


@pytest.mark.parametrize("capture_worker", [True, False], ids=["worker", "in-process"])
async def test_a_refused_peer_gets_no_prompt_and_a_confirmed_one_is_asked_once(
        backend, proxy, admin, make_config, capture_worker):  # type: ignore[no-untyped-def]
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, capture_worker=capture_worker))
    api = await admin(client.app)
    asked: list[str] = []
    refuse = True

    async def check(url: str) -> str | None:
        asked.append(url)
        return "the old container vllm-old is exited" if refuse else None

    client.app[PEERS_KEY].bind(check)
    for _ in range(3):
        resp = await client.post("/v1/completions", json=GREEDY)
        assert resp.status == 200 and b"[DONE]" in await resp.read()
    assert await _shadow_errors(api, 3) == ["unconfirmed"] * 3
    assert shadow.seen == [] and len(primary.seen) == 3
    # Only the mirror lane asks (the primary's connections never wait for it).
    assert 1 <= len(asked) <= 3 and set(asked) == {shadow.url}

    refuse = False
    client.app[PEERS_KEY].bind(check)
    await asyncio.sleep(2.1)  # the fail-fast window after (up to) three refusals
    for _ in range(3):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    assert (await _shadow_errors(api, 6))[3:] == [None] * 3
    assert len(shadow.seen) == 3
