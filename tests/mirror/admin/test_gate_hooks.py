"""The gate as Argo Rollouts and Flagger call it, against a proxy serving on a real socket.

Each case (pass, fail, inconclusive, capture worker down) is asked exactly as the
engines ask: Argo's `web` provider (GET with its headers, the JSON body judged by
`successCondition: result.pass == true` / `failureCondition: result.verdict == "fail"`,
a non-2xx answer an Error), Flagger's webhooks (POST of {name, namespace, phase,
checksum, metadata}; above 202 fails the check; the rollback hook rolls back on 2xx),
and `vllm-cutover gate --url` (exit code). What the engines then do: docs/FLEET.md.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from typing import Any

import pytest

from proxy.cli import main as cli_main
from proxy.mirror.app import MIRROR_KEY
from proxy.mirror.config import AdminConfig
from tests.gate_helpers import tokens_only
from tests.mirror.conftest import TOKEN

GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}
# Small samples judged on tokens alone (fake backends answer in zero time).
CRITERIA = tokens_only(min_samples=5, min_match_rate=0.5)
GATE_TOKEN = "read-only-gate-token"
FLAGGER_BODY = {"name": "vllm", "namespace": "llm", "phase": "Progressing",
                "checksum": "6c5b8f", "metadata": {"token": GATE_TOKEN}}


def argo_phase(status: int, body: Any) -> str:
    """How Argo Rollouts' web provider classifies one measurement."""
    if not 200 <= status < 300:
        return "Error"
    if body["pass"] is True:
        return "Successful"
    return "Failed" if body["verdict"] == "fail" else "Inconclusive"


async def ask_all(api: Any) -> dict[str, Any]:
    argo = await api.get("/admin/gate/analysis", headers={
        "Authorization": f"Bearer {GATE_TOKEN}", "User-Agent": "argo-rollouts/v1.8.2",
        "Accept": "*/*"})
    argo_body = await argo.json()
    flagger = await api.post("/admin/gate/flagger", json=FLAGGER_BODY)
    rollback = await api.post("/admin/gate/flagger/rollback", json=FLAGGER_BODY)
    admin_url = str(api.make_url("")).rstrip("/")
    code = await asyncio.to_thread(cli_main, ["gate", "--url", admin_url, "--token", GATE_TOKEN])
    return {"argo": argo_phase(argo.status, argo_body), "argo_status": argo.status,
            "flagger_advances": flagger.status <= 202,
            "flagger_rolls_back": 200 <= rollback.status < 300, "cli": code,
            "verdict": argo_body.get("verdict")}


async def _fleet(backend: Any, proxy: Any, admin: Any, make_config: Any, settle: Any,
                 words: list[str] | None, requests: int, **config: Any) -> tuple[Any, Any]:
    primary = await backend()
    shadow = await backend(words=words) if words else await backend()
    base = make_config(primary.url, shadow.url, gate=CRITERIA, **config)
    client = await proxy(replace(base, admin=AdminConfig(token=TOKEN, gate_token=GATE_TOKEN)))
    for _ in range(requests):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    if not config.get("capture_worker"):
        await settle(client.app)
    return client, await admin(client.app)


@pytest.mark.parametrize(("case", "words", "requests", "expected"), [
    ("pass", None, 6, {"argo": "Successful", "flagger_advances": True,
                       "flagger_rolls_back": False, "cli": 0}),
    ("fail", ["Other", " words"], 6, {"argo": "Failed", "flagger_advances": False,
                                      "flagger_rolls_back": True, "cli": 1}),
    ("inconclusive", None, 2, {"argo": "Inconclusive", "flagger_advances": False,
                               "flagger_rolls_back": False, "cli": 2}),
])
async def test_each_verdict_as_the_engines_read_it(backend, proxy, admin, make_config, settle,
                                                   case, words, requests, expected):
    _client, api = await _fleet(backend, proxy, admin, make_config, settle, words, requests)
    answers = await ask_all(api)
    assert answers["verdict"] == case and answers["argo_status"] == 200
    assert {k: answers[k] for k in expected} == expected
    stats = await (await api.get("/admin/stats")).json()
    assert stats["live"]["flagger"]["phase"] == "Progressing"
    assert stats["live"]["flagger"]["hook"] == "rollback"


async def test_worker_down_is_an_error_to_argo_and_no_rollback_to_flagger(
        backend, proxy, admin, make_config, settle):
    client, api = await _fleet(backend, proxy, admin, make_config, settle, None, 1,
                               capture_worker=True)
    link = client.app[MIRROR_KEY].link
    for _ in range(200):
        if link.ready:
            break
        await asyncio.sleep(0.01)
    os.kill(link.pid, signal.SIGKILL)
    for _ in range(100):
        if not link.ready:
            break
        await asyncio.sleep(0.01)
    answers = await ask_all(api)
    assert answers == {"argo": "Error", "argo_status": 503, "flagger_advances": False,
                       "flagger_rolls_back": False, "cli": 4, "verdict": None}  # no usable answer


async def test_token_rules(backend, proxy, admin, make_config):
    primary = await backend()
    config = make_config(primary.url, None)
    api = await admin((await proxy(replace(config, admin=AdminConfig(
        token=TOKEN, gate_token=GATE_TOKEN)))).app)
    assert (await api.get("/admin/gate/analysis")).status == 401
    assert (await api.get("/admin/gate/analysis", headers={
        "Authorization": "Bearer wrong-token-x"})).status == 401
    for token in (TOKEN, GATE_TOKEN):  # the admin token works here too
        resp = await api.get("/admin/gate/analysis", headers={"Authorization": f"Bearer {token}"})
        assert resp.status == 200
    no_token = {**FLAGGER_BODY, "metadata": {}}
    assert (await api.post("/admin/gate/flagger", json=no_token)).status == 401
    bad = await api.post("/admin/gate/flagger", json={**FLAGGER_BODY, "phase": "Bogus"})
    assert bad.status == 400 and "'Bogus'" in (await bad.json())["error"]["message"]
    assert (await api.post("/admin/gate/flagger", data=b"not json")).status == 400
    opened = await admin((await proxy(replace(config, admin=AdminConfig(gate_open=True)))).app)
    assert (await opened.get("/admin/gate/analysis")).status == 200
    assert (await opened.post("/admin/gate/flagger", json=no_token)).status == 409
