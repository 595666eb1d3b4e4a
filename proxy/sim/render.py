"""vLLM-shaped response bodies: SSE chunks from string templates, full answers from dicts.

Streaming is the hot path of the benchmark, so a chunk is one f-string around
pre-encoded JSON pieces (each token's JSON text is cached in the vocabulary)
instead of a `json.dumps` of a fresh dict per chunk.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from proxy.sim.request import SamplingSpec
from proxy.sim.tokens import Generation, top_logprobs
from proxy.sim.vocab import Vocab

DONE = b"data: [DONE]\n\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _chat_logprobs(vocab: Vocab, gen: Generation, positions: range, k: int) -> dict[str, Any]:
    content = []
    for pos in positions:
        ranked = top_logprobs(vocab, gen, pos, k)
        entries = [
            {"token": vocab.texts[t], "logprob": lp, "bytes": list(vocab.token_bytes(t))}
            for t, lp in ranked
        ]
        content.append({**entries[0], "top_logprobs": entries[:k]})
    return {"content": content}


def _completion_logprobs(
    vocab: Vocab, gen: Generation, positions: range, k: int, offset: int
) -> dict[str, Any]:
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for pos in positions:
        ranked = top_logprobs(vocab, gen, pos, k)
        text = vocab.texts[gen.token_ids[pos]]
        tokens.append(text)
        token_logprobs.append(ranked[0][1])
        tops.append({vocab.texts[t]: lp for t, lp in ranked})
        offsets.append(offset)
        offset += len(text)
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": tops,
    }


def logprobs_json(
    vocab: Vocab, spec: SamplingSpec, gen: Generation, positions: range, text_offset: int
) -> str:
    if spec.logprobs is None:
        return "null"
    if spec.endpoint == "chat":
        return _dumps(_chat_logprobs(vocab, gen, positions, spec.logprobs))
    return _dumps(_completion_logprobs(vocab, gen, positions, spec.logprobs, text_offset))


def usage(spec: SamplingSpec, gens: Sequence[Generation]) -> dict[str, int]:
    completion = sum(len(g.token_ids) for g in gens)
    prompt = len(spec.prompt_ids)
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


class ChunkEncoder:
    """Encodes one streamed answer's SSE events (`data: {json}\\n\\n`) as bytes."""

    def __init__(self, vocab: Vocab, spec: SamplingSpec, request_id: str, model: str) -> None:
        self.vocab = vocab
        self.spec = spec
        self._json_bytes = vocab.json_bytes
        created = int(time.time())
        if spec.endpoint == "chat":
            obj = "chat.completion.chunk"
        else:
            obj = "text_completion"
        self._head = (
            f'data: {{"id":{_dumps(request_id)},"object":"{obj}","created":{created},'
            f'"model":{_dumps(model)},"choices":['
        ).encode()
        self._tail = b"]}\n\n" if spec.endpoint == "chat" else b'],"usage":null}\n\n'

    def _text_json(self, token_ids: Sequence[int]) -> bytes:
        texts = self._json_bytes
        if len(token_ids) == 1:
            return texts[token_ids[0]]
        return b'"' + b"".join(texts[t][1:-1] for t in token_ids) + b'"'

    def role_chunk(self, index: int) -> bytes:
        """Chat's first event: the assistant role with empty content."""
        prompt_ids = ""
        if self.spec.return_token_ids and index == 0:
            prompt_ids = f',"prompt_token_ids":{_dumps(list(self.spec.prompt_ids))}'
        choice = (
            f'{{"index":{index},"delta":{{"role":"assistant","content":""}},'
            '"logprobs":null,"finish_reason":null}'
        )
        return self._head + (choice + "]" + prompt_ids + "}\n\n").encode()

    def token_chunk(
        self,
        index: int,
        gen: Generation,
        start: int,
        stop: int,
        text_offset: int,
        last: bool,
    ) -> bytes:
        ids = gen.token_ids[start:stop]
        spec = self.spec
        lp = b"null"
        if spec.logprobs is not None:
            lp = logprobs_json(self.vocab, spec, gen, range(start, stop), text_offset).encode()
        if last:
            ending = (
                f',"finish_reason":"{gen.finish_reason}",'
                f'"stop_reason":{_dumps(gen.stop_reason)},"token_ids":'
            ).encode()
        else:
            ending = b',"finish_reason":null,"stop_reason":null,"token_ids":'
        token_ids = b"null"
        if spec.return_token_ids:
            token_ids = ("[" + ",".join(map(str, ids)) + "]").encode()
        if spec.endpoint == "chat":
            opening, after_text = b'{"index":%d,"delta":{"content":' % index, b'},"logprobs":'
        else:
            opening, after_text = b'{"index":%d,"text":' % index, b',"logprobs":'
            if spec.return_token_ids and start == 0:
                prompt_ids = _dumps(list(spec.prompt_ids)).encode()
                after_text = b',"prompt_token_ids":' + prompt_ids + after_text
        text = self._text_json(ids) if ids else b'""'
        return b"".join(
            (self._head, opening, text, after_text, lp, ending, token_ids, b"}", self._tail)
        )

    def usage_chunk(self, gens: Sequence[Generation]) -> bytes:
        return self._head + ('],"usage":' + _dumps(usage(self.spec, gens)) + "}\n\n").encode()


def full_response(
    vocab: Vocab,
    spec: SamplingSpec,
    gens: Sequence[Generation],
    request_id: str,
    model: str,
    fingerprint: str,
) -> dict[str, Any]:
    """The non-streaming answer, shaped like vLLM's."""
    choices: list[dict[str, Any]] = []
    for index, gen in enumerate(gens):
        text = vocab.text_of(gen.token_ids)
        everything = range(len(gen.token_ids))
        logprobs = None
        if spec.logprobs is not None:
            logprobs = json.loads(logprobs_json(vocab, spec, gen, everything, 0))
        choice: dict[str, Any] = {"index": index}
        if spec.endpoint == "chat":
            choice["message"] = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "tool_calls": [],
                "reasoning_content": None,
            }
        else:
            choice["text"] = text
        choice.update(
            logprobs=logprobs,
            finish_reason=gen.finish_reason,
            stop_reason=gen.stop_reason,
            token_ids=list(gen.token_ids) if spec.return_token_ids else None,
        )
        if spec.endpoint == "completions":
            choice["prompt_token_ids"] = list(spec.prompt_ids) if spec.return_token_ids else None
        choices.append(choice)
    body: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion" if spec.endpoint == "chat" else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(spec, gens),
        "system_fingerprint": fingerprint,
    }
    if spec.endpoint == "chat":
        body["prompt_token_ids"] = list(spec.prompt_ids) if spec.return_token_ids else None
    return body


def error_body(
    status: int, message: str, error_type: str, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}
