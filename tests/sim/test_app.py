from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig


def sse_events(raw: bytes) -> list[Any]:
    """Parse a complete SSE body into JSON payloads ('[DONE]' kept as a string)."""
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


async def client_for(aiohttp_client: Any, **knobs: Any) -> Any:
    return await aiohttp_client(make_sim_app(SimConfig(**knobs)))


async def test_streamed_completion_matches_the_non_streamed_one(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    body = {"prompt": "same prompt", "max_tokens": 9, "temperature": 0, "return_token_ids": True}
    plain = await (await client.post("/v1/completions", json=body)).json()
    resp = await client.post(
        "/v1/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(await resp.read())
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 9
    chunks = events[:-2]
    assert len(chunks) == 9 and all(c["usage"] is None for c in chunks)
    choice = plain["choices"][0]
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    streamed_ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert streamed_ids == choice["token_ids"]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == choice["prompt_token_ids"]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "length"]
    assert plain["usage"] == usage["usage"]


async def test_chat_stream_role_chunk_then_content(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, tokens_per_chunk=3)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7, "temperature": 0}
    plain = await (await client.post("/v1/chat/completions", json=body)).json()
    events = sse_events(
        await (await client.post("/v1/chat/completions", json={**body, "stream": True})).read()
    )
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    chunks = events[1:-1]
    assert len(chunks) == 3  # 7 tokens, 3 per chunk
    assert all(
        c["object"] == "chat.completion.chunk" and c["choices"][0]["token_ids"] is None
        for c in chunks
    )
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]
    assert plain["object"] == "chat.completion" and plain["usage"]["completion_tokens"] == 7


async def test_tokenize_detokenize_agree_with_generation(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    body = {"prompt": "tok test", "max_tokens": 12, "temperature": 0, "return_token_ids": True}
    choice = (await (await client.post("/v1/completions", json=body)).json())["choices"][0]
    tokenized = await (await client.post("/tokenize", json={"prompt": choice["text"]})).json()
    assert tokenized["tokens"] == choice["token_ids"] and tokenized["count"] == 12
    detok = await (await client.post("/detokenize", json={"tokens": choice["token_ids"]})).json()
    assert detok == {"prompt": choice["text"]}
    prompt = await (await client.post("/tokenize", json={"prompt": "tok test"})).json()
    assert prompt["tokens"] == choice["prompt_token_ids"]
    bad = await client.post("/detokenize", json={"tokens": ["x"]})
    assert bad.status == 400


async def test_chat_logprobs_and_completion_logprobs(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    chat = await (
        await client.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 3,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": 4,
            },
        )
    ).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and all(len(e["top_logprobs"]) == 4 for e in content)
    events = sse_events(
        await (
            await client.post(
                "/v1/completions",
                json={
                    "prompt": "x",
                    "max_tokens": 3,
                    "temperature": 0,
                    "logprobs": 2,
                    "stream": True,
                },
            )
        ).read()
    )
    lps = [e["choices"][0]["logprobs"] for e in events[:-1]]
    assert [len(lp["top_logprobs"][0]) for lp in lps] == [2, 2, 2]
    assert lps[1]["text_offset"][0] == len(lps[0]["tokens"][0])


async def test_info_endpoints(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, model_name="m1", version="9.9.9-sim")
    assert (await client.get("/health")).status == 200
    assert (await client.get("/ping")).status == 200
    assert await (await client.get("/version")).json() == {"version": "9.9.9-sim"}
    models = await (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["m1"]
    await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2})
    metrics = await (await client.get("/metrics")).text()
    assert 'vllm:generation_tokens_total{model_name="m1",engine="0"} 2' in metrics
    assert "vllm:time_to_first_token_seconds_count" in metrics


async def test_errors_look_like_vllm(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, model_name="m1")
    wrong = await client.post("/v1/completions", json={"model": "nope", "prompt": "a"})
    assert wrong.status == 404 and "`nope`" in (await wrong.json())["error"]["message"]
    bad = await client.post("/v1/completions", data=b"{not json")
    assert bad.status == 400 and (await bad.json())["error"]["code"] == 400


async def test_injected_http_500(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, error_rate=1.0)
    resp = await client.post("/v1/completions", json={"prompt": "a"})
    assert resp.status == 500 and (await resp.json())["error"]["type"] == "InternalServerError"


async def test_injected_reset_drops_the_stream(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, reset_rate=1.0)
    resp = await client.post(
        "/v1/completions", json={"prompt": "a", "max_tokens": 10, "stream": True, "temperature": 0}
    )
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})


async def test_injected_garbage_is_invalid_sse(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, garbage_rate=1.0)
    resp = await client.post(
        "/v1/completions", json={"prompt": "a", "max_tokens": 6, "stream": True, "temperature": 0}
    )
    with pytest.raises((AssertionError, ValueError)):
        sse_events(await resp.read())
    plain = await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 3})
    with pytest.raises(ValueError):
        json.loads(await plain.read())


async def test_two_sims_agree_unless_divergence_is_injected(aiohttp_client: Any) -> None:
    old = await client_for(aiohttp_client)
    twin = await client_for(aiohttp_client)
    new = await client_for(aiohttp_client, divergence_rate=1.0, divergence_at=2)
    body = {"prompt": "compare me", "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    ids = []
    for client in (old, twin, new):
        ids.append(
            (await (await client.post("/v1/completions", json=body)).json())["choices"][0][
                "token_ids"
            ]
        )
    assert ids[0] == ids[1]
    assert ids[2][:2] == ids[0][:2] and ids[2][2] != ids[0][2]


async def test_latency_knobs_shape_ttft_and_itl(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, ttft_ms=60, itl_ms=15)
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await client.post(
        "/v1/completions", json={"prompt": "a", "max_tokens": 5, "stream": True, "temperature": 0}
    )
    arrivals = []
    async for line in resp.content:
        if line.startswith(b"data: {"):
            arrivals.append(loop.time() - start)
    assert len(arrivals) == 5
    assert 0.055 <= arrivals[0] < 2.0
    # Events follow an absolute timeline from the request's start (no drift, and a late
    # event is followed by a short gap): the last one is due at TTFT + 4 ITL.
    assert arrivals[-1] >= 0.06 + 4 * 0.015 - 0.005, arrivals
    assert sorted(arrivals) == arrivals


async def test_n_choices_stream_and_full(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    body = {"prompt": "two", "max_tokens": 4, "n": 2, "seed": 7}
    full = await (await client.post("/v1/completions", json=body)).json()
    texts = [c["text"] for c in full["choices"]]
    assert len(texts) == 2 and texts[0] != texts[1]
    events = sse_events(
        await (await client.post("/v1/completions", json={**body, "stream": True})).read()
    )
    streamed = ["", ""]
    for event in events[:-1]:
        for choice in event["choices"]:
            streamed[choice["index"]] += choice["text"]
    assert streamed == texts


async def test_client_disconnect_aborts_the_request() -> None:
    from proxy.sim.server import start_sim

    sim = await start_sim(SimConfig(port=0, itl_ms=20))
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(
                sim.url + "/v1/completions",
                json={"prompt": "long", "max_tokens": 500, "ignore_eos": True, "stream": True},
            )
            await resp.content.readline()
            resp.close()  # drop the connection mid-stream
            metrics = ""
            for _ in range(50):
                await asyncio.sleep(0.05)
                async with session.get(sim.url + "/metrics") as m:
                    metrics = await m.text()
                if 'finished_reason="abort"} 1' in metrics:
                    break
            assert 'finished_reason="abort"} 1' in metrics
            assert 'vllm:num_requests_running{model_name="sim-model",engine="0"} 0' in metrics
    finally:
        await sim.stop()


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", b'{"prompt": "x\\ud800y", "max_tokens": 3}'),
    ("/v1/completions", b'{"prompt": ["x\\udfffy"], "max_tokens": 3, "stream": true}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x\\ud800y"}]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user\\ud800", "content": "x"}]}'),
    ("/tokenize", b'{"prompt": "x\\ud800y"}'),
])
async def test_a_lone_surrogate_is_refused_as_vllm_refuses_it(
        aiohttp_client: Any, path: str, body: bytes) -> None:
    # vLLM 0.32: pydantic lets the string through, its tokenizer raises a TypeError, and
    # the TypeError handler answers 400 BadRequestError with the message as is.
    client = await client_for(aiohttp_client)
    resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400 and resp.content_type == "application/json"
    assert await resp.json() == {"error": {
        "message": "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, "
                   "InputSequence]]", "type": "BadRequestError", "param": None, "code": 400}}
    ok = await client.post("/v1/completions", json={"prompt": "x\U0001f642y", "max_tokens": 2})
    assert ok.status == 200  # a surrogate pair is one character, not a lone surrogate


async def test_a_lone_surrogate_in_the_model_name_is_a_json_400(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    resp = await client.post("/v1/completions", data=b'{"model": "m\\udc00", "prompt": "x"}',
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["type"] == "BadRequestError" and "surrogates not allowed" in error["message"]
