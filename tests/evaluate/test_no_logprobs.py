"""An engine that answers without logprobs is refused by `eval record` (exit 2, no file).

A fake OpenAI server of a few lines, in a thread with its own loop: `eval` runs its own
event loop (asyncio.run), as the CLI does."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from proxy.cli import main


async def _models(_: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "m", "max_model_len": 64}]})


async def _version(_: web.Request) -> web.Response:
    return web.json_response({"version": "0.0.1"})


async def _completions(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i, piece in enumerate(("a", "b")):
        chunk = {"choices": [{"index": 0, "text": piece, "token_ids": [i], "logprobs": None,
                              "finish_reason": "length" if i else None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
def no_logprobs_url() -> Iterator[str]:
    app = web.Application()
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/version", _version)
    app.router.add_post("/v1/completions", _completions)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())
    loop.close()


def test_engine_without_logprobs_is_refused(no_logprobs_url: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    out = tmp_path / "golden.jsonl"
    assert main(["eval", "record", "--url", no_logprobs_url, "--prompts", str(prompts),
                 "-o", str(out)]) == 3
    assert "returned no logprobs" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]
