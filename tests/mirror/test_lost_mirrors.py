"""A mirror that cannot be sent is recorded as failed and counted with its reason."""

from __future__ import annotations

import json

from proxy.capture.request import json_bytes
from proxy.mirror import exchange
from proxy.mirror.app import METRICS_KEY, STORE_KEY


def test_json_bytes_escapes_only_what_utf8_cannot_carry() -> None:
    assert json_bytes({"p": "caf\u00e9"}) == '{"p":"caf\u00e9"}'.encode()
    lone = json_bytes({"p": "x\ud800y"})
    assert lone == b'{"p":"x\\ud800y"}'
    assert json.loads(lone) == {"p": "x\ud800y"}  # the same request, as valid UTF-8


async def test_a_baseline_that_cannot_be_built_is_counted_not_silent(
        backend, proxy, make_config, settle, monkeypatch) -> None:
    def broken(body: bytes) -> bytes:
        raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(exchange, "unstreamed", broken)
    a, b, c = await backend(), await backend(), await backend()
    # The baseline is rebuilt unstreamed only on request (it streams like the client by default).
    client = await proxy(make_config(a.url, b.url, c.url, baseline_stream=False))
    resp = await client.post("/v1/completions", json={"prompt": "hi", "stream": True,
                                                      "temperature": 0})
    assert resp.status == 200
    await resp.read()
    await settle(client.app)
    (record,) = await client.app[STORE_KEY].call(lambda s: list(s.records()))
    sides = {cap.role: cap for cap in record.captures}
    assert sides["baseline"].error == "internal" and sides["shadow"].error is None
    dropped = client.app[METRICS_KEY].shadow_dropped
    assert dropped.labels("baseline_internal")._value.get() == 1
    assert not c.seen  # nothing went to the baseline
