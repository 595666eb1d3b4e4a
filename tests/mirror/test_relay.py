"""Relaying to the primary: byte-exact bodies, headers, status, proxy-marked errors."""

from __future__ import annotations

import asyncio
import json
import re
from time import perf_counter

from proxy.metrics import ProxyMetrics
from proxy.mirror.app import METRICS_KEY
from proxy.mirror.relay import PROXY_ERROR_HEADER, PROXY_ERROR_TYPE


async def test_non_generation_request_relayed_byte_exact(backend, proxy, make_config, dead_url):
    primary = await backend()
    client = await proxy(make_config(primary.url, dead_url()))
    body = b"\x00\x01 raw \xff bytes"
    resp = await client.post("/echo/a/b?x=1&y=%20z", data=body, headers={
        "Authorization": "Bearer user-key", "X-Custom": "v", "Connection": "keep-alive, X-Hop",
        "X-Hop": "drop me"})
    assert resp.status == 207
    assert await resp.read() == b"echo:" + body
    assert resp.headers["X-Backend"] == "yes"
    assert PROXY_ERROR_HEADER not in resp.headers
    seen = primary.seen[0]
    assert seen["path"] == "/echo/a/b?x=1&y=%20z"
    assert seen["headers"]["Authorization"] == "Bearer user-key"
    assert seen["headers"]["X-Custom"] == "v"
    assert "X-Hop" not in seen["headers"]


async def test_primary_metrics_proxied_own_metrics_elsewhere(backend, proxy, make_config,
                                                             dead_url):
    primary = await backend()
    client = await proxy(make_config(primary.url, dead_url()))
    resp = await client.get("/metrics")
    assert (await resp.text()).startswith("vllm:num_requests_running")
    own = await client.get("/_vllm_cutover/metrics")
    assert "vllm_cutover_requests_total" in await own.text()


async def test_stream_relayed_byte_exact_and_unbuffered(backend, proxy, make_config, settle):
    gate = asyncio.Event()
    primary = await backend(gate=gate)
    shadow = await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    req = {"model": "m", "prompt": "hi", "stream": True, "temperature": 0}
    resp = await client.post("/v1/completions", json=req, headers={"Authorization": "Bearer k"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream"
    # The backend holds the rest of the stream until we saw the first chunk: unbuffered.
    first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    gate.set()
    rest = await resp.read()
    direct = b"".join(primary._chunk(i, w, False, False) for i, w in enumerate(primary.words))
    assert first + rest == direct + b"data: [DONE]\n\n"
    assert json.loads(primary.seen[0]["raw"]) == req  # primary got the client's body untouched
    await settle(client.app)
    assert shadow.seen[0]["json"]["return_token_ids"] is True
    assert shadow.seen[0]["headers"]["Authorization"] == "Bearer k"
    assert primary.seen[0]["headers"]["Authorization"] == "Bearer k"


async def test_non_stream_generation_byte_exact(backend, proxy, make_config):
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    raw = b'{"model": "m", "prompt": "hi", "temperature": 0}'
    resp = await client.post("/v1/completions", data=raw,
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert json.loads(await resp.read())["choices"][0]["text"] == "Hello world! Bye"
    assert primary.seen[0]["raw"] == raw


async def test_primary_unreachable_is_a_marked_502(proxy, make_config, dead_url, settle):
    client = await proxy(make_config(dead_url(), dead_url()))
    resp = await client.post("/v1/completions", json={"prompt": "x", "temperature": 0})
    assert resp.status == 502
    assert resp.headers[PROXY_ERROR_HEADER] == "1"
    assert (await resp.json())["error"]["type"] == PROXY_ERROR_TYPE
    await settle(client.app)


async def test_body_over_limit_is_a_marked_413(backend, proxy, make_config):
    primary = await backend()
    client = await proxy(make_config(primary.url, None, max_body_bytes=1024))
    resp = await client.post("/v1/completions", data=b"x" * 4096)
    assert resp.status == 413
    assert resp.headers[PROXY_ERROR_HEADER] == "1"
    assert primary.seen == []


async def test_malformed_json_forwarded_not_mirrored(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    resp = await client.post("/v1/chat/completions", data=b"{not json",
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400  # the primary's own answer
    assert PROXY_ERROR_HEADER not in resp.headers
    assert primary.seen[0]["raw"] == b"{not json"
    await settle(client.app)
    assert shadow.seen == []
    metrics: ProxyMetrics = client.app[METRICS_KEY]
    assert metrics.shadow_dropped.labels("malformed_json")._value.get() == 1


async def test_slow_shadow_does_not_delay_client(backend, proxy, make_config, settle):
    primary = await backend()
    shadow = await backend(ttft_s=1.0)
    client = await proxy(make_config(primary.url, shadow.url))
    t0 = perf_counter()
    resp = await client.post("/v1/completions",
                             json={"prompt": "x", "stream": True, "temperature": 0})
    await resp.read()
    assert perf_counter() - t0 < 0.5
    await settle(client.app)


async def test_expect_continue_and_head(backend, proxy, make_config):
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    resp = await client.post("/echo/x", data=b"y" * 2048, expect100=True)
    assert resp.status == 207 and await resp.read() == b"echo:" + b"y" * 2048
    assert "Expect" not in primary.seen[0]["headers"]
    head = await client.head("/echo/h")
    assert head.status == 207 and await head.read() == b""
    assert head.headers["Content-Length"] == str(len(b"echo:"))


async def test_primary_reset_mid_stream_reaches_client_as_broken_stream(backend, proxy,
                                                                         make_config, settle):
    import aiohttp
    import pytest

    from proxy.mirror.app import STORE_KEY

    primary = await backend(mode="reset")
    shadow = await backend()
    client = await proxy(make_config(primary.url, shadow.url))
    resp = await client.post("/v1/completions",
                             json={"prompt": "x", "stream": True, "temperature": 0})
    assert resp.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()  # no clean end of stream: the client sees what the primary did
    await settle(client.app)
    (record,) = await client.app[STORE_KEY].call(lambda s: list(s.records()))
    assert record.captures[0].role == "primary" and record.captures[0].error == "reset"


async def test_a_slow_client_pauses_the_primary_nothing_piles_up(backend, proxy, make_config):
    """Backpressure: while the client reads nothing, the primary cannot send much more."""
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    total = 256 * 1024 * 1024
    resp = await client.get(f"/bytes/{total}")
    first = await resp.content.readexactly(65536)
    await asyncio.sleep(0.5)
    stalled_at = primary.sent
    await asyncio.sleep(0.3)
    assert primary.sent == stalled_at < total // 4  # socket buffers, not the proxy's memory
    received = len(first)
    expected = bytes(range(256)) * 256
    while chunk := await resp.content.read(1 << 20):
        offset = received % len(expected)
        assert chunk[:64] == (expected + expected)[offset:offset + 64]
        received += len(chunk)
    assert received == total == primary.sent


async def test_http10_client_gets_a_close_delimited_stream(backend, proxy, make_config):
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    reader, writer = await asyncio.open_connection(client.host, client.port)
    body = json.dumps({"prompt": "hi", "stream": True, "temperature": 0}).encode()
    writer.write(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    answer = await asyncio.wait_for(reader.read(), 5)  # to EOF: the proxy closes at the end
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    direct = b"".join(primary._chunk(i, w, False, False) for i, w in enumerate(primary.words))
    assert payload == direct + b"data: [DONE]\n\n"


async def test_primary_without_a_valid_answer_is_a_marked_502(proxy, make_config, dead_url):
    """Garbage instead of an HTTP head, or a close before any answer: the proxy says so."""
    answers = iter([b"SSH-2.0-OpenSSH_9.2\r\n\r\n", b""])

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(next(answers))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = await proxy(make_config(url, dead_url()))
    for expected in ("invalid HTTP answer", "closed the connection without an answer"):
        resp = await client.get("/v1/models")
        body = await resp.json()
        assert resp.status == 502 and resp.headers[PROXY_ERROR_HEADER] == "1"
        assert body["error"]["type"] == PROXY_ERROR_TYPE and expected in body["error"]["message"]
    server.close()
    await server.wait_closed()


async def test_client_leaving_while_the_primary_is_paused_closes_the_primary(backend, proxy,
                                                                            make_config):
    """Backpressure, then the client goes: the paused primary connection is closed too."""
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    resp = await client.get(f"/bytes/{256 * 1024 * 1024}")
    await resp.content.readexactly(65536)
    await asyncio.sleep(0.3)  # the primary is paused now (see the test above)
    resp.close()  # the client drops the connection without reading on
    await asyncio.wait_for(primary.cancelled.wait(), 5)
    assert primary.sent < 256 * 1024 * 1024


async def test_every_client_request_is_timed_without_a_shadow(backend, proxy, make_config):
    """The dashboard's client p99 reads vllm_cutover_client_e2e_seconds: every generation
    request relayed counts, with no shadow route at all (mirrored-only series would be
    empty once a cutover ends); other paths do not."""
    primary = await backend()
    client = await proxy(make_config(primary.url, None))
    for _ in range(3):
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": "hi"})
        assert resp.status == 200
        await resp.read()
    await (await client.post("/echo/x", data=b"raw")).read()
    text = await (await client.get("/_vllm_cutover/metrics")).text()
    counts = re.findall(r'^vllm_cutover_client_e2e_seconds_count\{endpoint="([^"]+)"\} (\S+)$',
                        text, re.MULTILINE)
    assert counts == [("completions", "3.0")], counts
