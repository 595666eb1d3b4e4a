"""Mirrored requests end to end: records, comparisons, token id sources, shadow faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from proxy.evidence.store import SqliteStore
from proxy.metrics import ProxyMetrics
from proxy.mirror.app import METRICS_KEY, MIRROR_KEY, STORE_KEY
from proxy.mirror.load import LoopLoad

GREEDY = {"model": "m", "prompt": "hi", "temperature": 0, "max_tokens": 8}


async def _records(client: Any, settle: Any) -> list[Any]:
    await settle(client.app)
    return await client.app[STORE_KEY].call(lambda s: list(s.records()))


def _capture(record: Any, role: str) -> Any:
    return next(c for c in record.captures if c.role == role)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_identical_backends_match_without_tokenize(backend, proxy, make_config, settle,
                                                          stream, path):
    primary, shadow, baseline = await backend(), await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, baseline.url))
    body: dict[str, Any] = {**GREEDY, "stream": stream}
    if "chat" in path:
        body = {**{k: v for k, v in body.items() if k != "prompt"},
                "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post(path, json=body)
    assert resp.status == 200
    await resp.read()
    (record,) = await _records(client, settle)
    assert record.token_ids_source == "equal_text"
    assert primary.tokenized == 0  # equal texts give equal ids: nothing to re-tokenize
    assert _capture(record, "primary").text == ""  # text is not stored by default
    assert {c.against: c.outcome for c in record.comparisons} == {
        "shadow": "match", "baseline": "match"}
    digest = record.stored.text("primary") if record.stored else None
    assert digest is not None and digest.chars == len("Hello world! Bye")
    # Streamed like the client by default: its latency is read the way the shadow's is.
    assert baseline.seen[0]["json"]["stream"] is stream
    assert shadow.seen[0]["json"]["stream"] is stream
    assert _capture(record, "shadow").error is None
    if stream:  # no usage chunk: the count is the engine's of a side with the same text
        assert _capture(record, "primary").output_tokens == len(primary.words)
        assert _capture(record, "primary").ttft_s is not None
        assert len(_capture(record, "primary").itl_s) == 3


async def test_divergence_found_and_client_ids_used(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend(words=["Hello", " there", "!", " Bye"])
    client = await proxy(make_config(primary.url, shadow.url))
    resp = await client.post("/v1/completions",
                             json={**GREEDY, "stream": True, "return_token_ids": True})
    await resp.read()
    (record,) = await _records(client, settle)
    assert record.token_ids_source == "client"
    # The fake's ids are positional, so the ids match but the text the client reads does
    # not: the answer diverged, in its text, on the text's own basis.
    comparison = record.comparisons[0]
    assert comparison.exact_match is True
    assert (comparison.outcome, comparison.field, comparison.basis) == (
        "diverged", "text", "text")
    resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
    await resp.read()
    records = await _records(client, settle)
    comparison = records[-1].comparisons[0]
    assert records[-1].token_ids_source == "tokenize"
    assert comparison.outcome == "diverged"
    assert comparison.first_divergence == len("Hello ")  # one id per character
    assert primary.tokenized == 2  # both texts, through the primary (keep-alive pool)
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.comparisons.labels("shadow", "diverged", "true")._value.get() == 2  # both requests


@pytest.mark.parametrize(("mode", "error"), [("dead", "connect"), ("reset", "reset"),
                                              ("garbage", "invalid_sse")])
async def test_shadow_faults_become_records(backend, proxy, make_config, settle, dead_url,
                                            mode, error):
    primary = await backend()
    shadow_url = dead_url() if mode == "dead" else (await backend(mode=mode)).url
    client = await proxy(make_config(primary.url, shadow_url))
    resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
    assert resp.status == 200
    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    (record,) = await _records(client, settle)
    assert _capture(record, "shadow").error == error
    assert record.comparisons[0].outcome in ("error", "not_comparable")


async def test_dead_shadow_costs_no_task_after_the_first_refusal(backend, proxy, make_config,
                                                                  settle, dead_url):
    primary = await backend()
    client = await proxy(make_config(primary.url, dead_url()))
    for _ in range(3):
        resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
        assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    records = await _records(client, settle)
    assert [_capture(r, "shadow").error for r in records] == ["connect"] * 3
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.mirrored.labels("shadow")._value.get() == 1  # one real attempt
    assert metrics.shadow_dropped.labels("shadow_down")._value.get() == 2


async def test_a_late_loop_sheds_only_when_busy_with_its_own_work(backend, proxy,
                                                                   make_config, settle):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, overload_lag_s=0.01))
    mirror = client.app[MIRROR_KEY]

    async def send() -> None:
        resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
        assert (await resp.read()).endswith(b"data: [DONE]\n\n")  # the client is served

    # Late because other processes hold the CPUs (a load the probe no longer updates).
    mirror.admission.load = LoopLoad(lag_s=0.05, busy=0.1)
    await send()
    assert len(await _records(client, settle)) == 1
    mirror.admission.load.busy = 0.9  # late and busy with its own work
    await send()
    assert len(await _records(client, settle)) == 1
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.shadow_dropped.labels("overload")._value.get() == 1
    assert metrics.sampled._value.get() == 2
    mirror.flush_admission()
    admission = await client.app[STORE_KEY].call(SqliteStore.admission)
    assert (admission.eligible, dict(admission.shed)) == (2, {"overload": 1})


async def test_shadow_timeout(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend(ttft_s=5.0)
    client = await proxy(make_config(primary.url, shadow.url, shadow_timeout_s=0.2))
    resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
    await resp.read()
    (record,) = await _records(client, settle)
    assert _capture(record, "shadow").error == "timeout"


async def test_inflight_cap_drops_and_counts(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend(ttft_s=0.3)
    client = await proxy(make_config(primary.url, shadow.url, max_shadow_inflight=1))

    async def one() -> int:
        resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
        await resp.read()
        return resp.status

    assert await asyncio.gather(one(), one(), one()) == [200, 200, 200]
    records = await _records(client, settle)
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert len(records) == 1
    assert metrics.shadow_dropped.labels("inflight_cap")._value.get() == 2
    assert metrics.shadow_inflight._value.get() == 0


async def test_sample_rate_zero_mirrors_nothing(backend, proxy, make_config, settle):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, sample_rate=0.0))
    for _ in range(3):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    assert await _records(client, settle) == []
    assert shadow.seen == []


async def test_sampled_request_not_token_compared(backend, proxy, make_config, settle):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    await (await client.post("/v1/completions", json={"prompt": "x", "stream": True})).read()
    (record,) = await _records(client, settle)
    assert record.meta.deterministic is False
    assert record.token_ids_source == "none"
    aggregates = await client.app[STORE_KEY].call(SqliteStore.aggregates)
    assert aggregates.shadow.compared == 0


async def test_baseline_streamed_by_default(backend, proxy, make_config, settle):
    primary, shadow, baseline = await backend(), await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, baseline.url))
    body = {**GREEDY, "stream": True, "stream_options": {"include_usage": True}}
    await (await client.post("/v1/completions", json=body)).read()
    (record,) = await _records(client, settle)
    assert baseline.seen[0]["json"]["stream"] is True
    assert baseline.seen[0]["json"]["stream_options"] == {"include_usage": True}
    assert record.baseline_streamed is True
    assert len(_capture(record, "baseline").itl_s) == 3


async def test_baseline_unstreamed_on_request(backend, proxy, make_config, settle):
    primary, shadow, baseline = await backend(), await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, baseline.url,
                                     baseline_stream=False))
    body = {**GREEDY, "stream": True}
    await (await client.post("/v1/completions", json=body)).read()
    (record,) = await _records(client, settle)
    assert baseline.seen[0]["json"]["stream"] is False
    assert record.baseline_streamed is False
    assert {c.against: c.outcome for c in record.comparisons}["baseline"] == "match"


async def test_shadow_speaking_no_http_at_all(backend, proxy, make_config, settle):
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"\x00\xffTHIS IS NOT HTTP\r\n\r\n" * 10)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    primary = await backend()
    client = await proxy(make_config(primary.url, f"http://127.0.0.1:{port}"))
    resp = await client.post("/v1/completions", json={**GREEDY, "stream": True})
    assert resp.status == 200 and (await resp.read()).endswith(b"[DONE]\n\n")
    (record,) = await _records(client, settle)
    assert _capture(record, "shadow").error in ("bad_response", "reset")
    server.close()
    await server.wait_closed()


async def test_request_kept_only_with_store_text(backend, proxy, make_config, settle):
    """`--store-text` keeps the request, so `eval record --records DB` can replay it."""
    from proxy.mirror.config import StoreConfig

    primary, shadow = await backend(), await backend()
    for keep in (False, True):
        client = await proxy(make_config(primary.url, shadow.url,
                                         store=StoreConfig(db_path=":memory:", store_text=keep)))
        resp = await client.post("/v1/completions", json=GREEDY)
        await resp.read()
        (record,) = await _records(client, settle)
        assert (record.request_json is not None) is keep
        if keep:
            assert record.request_json is not None and json.loads(record.request_json) == GREEDY


@pytest.mark.parametrize(("path", "knobs", "error"), [
    ("/v1/completions", {"usage_tokens": 1}, "usage_mismatch"),
    ("/v1/responses", {"mode": "final_only"}, "stream_text_mismatch"),
])
async def test_an_answer_that_contradicts_itself_is_never_a_match(
        backend, proxy, make_config, settle, path, knobs, error):
    """A shadow whose usage.completion_tokens (1) is not the 4 token ids it sent, or whose
    Responses stream has no text deltas, only the final object, is an error of its own."""
    primary, shadow = await backend(), await backend(**knobs)
    client = await proxy(make_config(primary.url, shadow.url))
    body = {"input": "hi", "temperature": 0, "stream": True} if "responses" in path \
        else {**GREEDY, "return_token_ids": True}
    resp = await client.post(path, json=body)
    assert resp.status == 200
    await resp.read()
    (record,) = await _records(client, settle)
    assert _capture(record, "primary").error is None
    assert _capture(record, "shadow").error == error
    (comparison,) = record.comparisons
    assert comparison.outcome == "error" and error in comparison.reason, comparison
