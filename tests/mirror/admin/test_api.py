"""The admin API: auth, routes, swap, gate, stats, records, /metrics."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "s3cret-admin-token"  # the one make_config sets
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", "/admin/routes"), ("POST", "/admin/swap"), ("GET", "/admin/records")])
@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-x", "Basic " + TOKEN, TOKEN])
async def test_auth_required(backend, proxy, admin, make_config, method, path, auth):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    api = await admin(client.app)
    headers = {"Authorization": auth} if auth else {}
    resp = await api.request(method, path, json={"primary": shadow.url}, headers=headers)
    assert resp.status == 401
    assert (await api.get("/admin/routes")).status == 200  # reading routes is open


async def test_routes_put_and_swap(backend, proxy, admin, make_config, settle):
    a, b, c = await backend(), await backend(), await backend()
    client = await proxy(make_config(a.url, b.url))
    api = await admin(client.app)
    routes = await (await api.get("/admin/routes")).json()
    assert routes == {"version": 1, "primary": a.url, "shadow": b.url, "baseline": None}
    resp = await api.post("/admin/swap", headers=AUTH)
    assert (await resp.json())["primary"] == b.url
    resp = await api.put("/admin/routes", json={"baseline": c.url}, headers=AUTH)
    assert await resp.json() == {"version": 3, "primary": b.url, "shadow": a.url,
                                 "baseline": c.url}
    await (await client.post("/v1/completions", json=GREEDY)).read()
    await settle(client.app)
    assert len(b.seen) == 1 and len(a.seen) == 1 and len(c.seen) == 1
    bad = await api.put("/admin/routes", json={"primary": "nope"}, headers=AUTH)
    assert bad.status == 400 and "'nope'" in (await bad.json())["error"]["message"]
    bad = await api.put("/admin/routes", json={"primary": a.url, "x": 1}, headers=AUTH)
    assert bad.status == 400
    resp = await api.put("/admin/routes", json={"shadow": None, "baseline": None}, headers=AUTH)
    assert (await resp.json())["shadow"] is None
    assert (await api.post("/admin/swap", headers=AUTH)).status == 409


async def test_no_token_configured_refuses(backend, proxy, admin, make_config):
    from dataclasses import replace

    from proxy.mirror.config import AdminConfig

    primary = await backend()
    config = replace(make_config(primary.url, None), admin=AdminConfig(token=None))
    api = await admin((await proxy(config)).app)
    resp = await api.post("/admin/swap", headers=AUTH)
    assert resp.status == 401
    assert "no admin token" in (await resp.json())["error"]["message"]


async def test_gate_stats_records_metrics(backend, proxy, admin, make_config, settle):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    api = await admin(client.app)
    for _ in range(3):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    await settle(client.app)
    gate = await api.get("/admin/gate")
    data = await gate.json()
    assert {"verdict", "reasons", "samples"} <= set(data)
    assert gate.status == (200 if data["verdict"] == "pass" else 409)
    stats = await (await api.get("/admin/stats")).json()
    assert stats["shadow"]["compared"] == 3 and stats["shadow"]["diverged"] == 0
    assert stats["live"]["shadow_inflight"] == 0
    records = await (await api.get("/admin/records?limit=2", headers=AUTH)).json()
    assert len(records["records"]) == 2
    after = records["records"][-1]["id"]
    assert records["records"][0]["id"] < after
    assert records["records"][0]["texts"]["primary"]["kind"] == "hmac_sha256"
    rest = await (await api.get(f"/admin/records?after={after}", headers=AUTH)).json()
    assert len(rest["records"]) == 1
    text = await (await api.get("/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert samples[("vllm_cutover_comparisons_total", (
        ("against", "shadow"), ("deterministic", "true"), ("outcome", "match")))] == 3
    assert "vllm_cutover_ttft_seconds" in families
    assert "vllm_cutover_first_divergence_tokens" in families
    assert samples[("vllm_cutover_verdict", (("verdict", data["verdict"]),))] == 1.0


@pytest.mark.parametrize(("shadow_words", "status", "verdict"), [
    (None, 200, "pass"), (["Nope"] * 4, 409, "fail")])
async def test_gate_pass_and_fail(backend, proxy, admin, make_config, settle, shadow_words,
                                  status, verdict):

    from tests.gate_helpers import tokens_only

    criteria = tokens_only(min_samples=8, min_match_rate=0.5)
    primary = await backend()
    shadow = await backend(words=shadow_words) if shadow_words else await backend()
    client = await proxy(make_config(primary.url, shadow.url, gate=criteria))
    api = await admin(client.app)
    for _ in range(10):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    await settle(client.app)
    gate = await api.get("/admin/gate")
    data = await gate.json()
    assert (gate.status, data["verdict"]) == (status, verdict), data["reasons"]
    assert data["samples"] == 10 and data["compared"] == 10
    assert data["diverged"] == (0 if verdict == "pass" else 10)
