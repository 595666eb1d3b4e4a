"""Micro-benchmark: SSE decoding + capture of a realistic vLLM chat stream on one core.

Prints events/s for: a reference loop (bytes.split + json.loads per event, the least any
parser must do), the SSE decoder alone, and decoder + CaptureBuilder (what the mirror runs
per relayed chunk), fed one event per chunk and in 4 KiB network-sized pieces.
Usage (repo root): python -m bench.capture_micro [--tokens 256] [--streams 200] [--top-logprobs K]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from proxy.capture.builder import CaptureBuilder
from proxy.capture.sse import SSEDecoder


def vllm_chat_stream(tokens: int, top_logprobs: int = 0) -> list[bytes]:
    head = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk",
            "created": 1760000000, "model": "nvidia/Llama-3.1-8B-Instruct-FP4"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}]}]
    for i in range(tokens):
        logprobs = None
        if top_logprobs:
            alts = [{"token": f" alt{j}", "logprob": -1.0 - j, "bytes": None}
                    for j in range(top_logprobs)]
            logprobs = {"content": [{"token": f" tok{i}", "logprob": -0.5, "bytes": None,
                                     "top_logprobs": alts}]}
        events.append({**head, "choices": [{"index": 0, "delta": {"content": f" tok{i}"},
                                            "logprobs": logprobs, "finish_reason": None,
                                            "token_ids": [1000 + i]}]})
    events.append({**head, "choices": [{"index": 0, "delta": {"content": ""},
                                        "logprobs": None, "finish_reason": "length"}]})
    events.append({**head, "choices": [], "usage": {"prompt_tokens": 12,
                                                    "completion_tokens": tokens}})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def rechunk(chunks: list[bytes], size: int) -> list[bytes]:
    raw = b"".join(chunks)
    return [raw[i:i + size] for i in range(0, len(raw), size)]


def reference(chunks: list[bytes]) -> None:
    for chunk in chunks:
        for part in chunk.split(b"\n\n"):
            if part and part != b"data: [DONE]":
                json.loads(part[6:])


def decoder_only(chunks: list[bytes]) -> None:
    decoder = SSEDecoder()
    for chunk in chunks:
        decoder.feed(chunk)


def with_capture(chunks: list[bytes]) -> None:
    perf = time.perf_counter
    builder = CaptureBuilder("primary", "old", perf())
    for chunk in chunks:
        builder.on_chunk(chunk, perf())
    builder.finish(200, perf())


def rate(fn: Callable[[list[bytes]], None], chunks: list[bytes], events: int, streams: int) -> float:
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(streams):
            fn(chunks)
        best = max(best, events * streams / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--top-logprobs", type=int, default=0, help="alternatives per token")
    args = parser.parse_args()
    per_event = vllm_chat_stream(args.tokens, args.top_logprobs)
    events = len(per_event)
    ref = rate(reference, per_event, events, args.streams)
    print(f"{events} events/stream, {args.streams} streams, best of 3")
    print(f"reference split+json.loads       {ref:>10,.0f} events/s")
    for label, chunks in (("1 event/chunk", per_event), ("4 KiB chunks ", rechunk(per_event, 4096))):
        dec = rate(decoder_only, chunks, events, args.streams)
        cap = rate(with_capture, chunks, events, args.streams)
        print(f"decoder         {label}    {dec:>10,.0f} events/s")
        print(f"decoder+capture {label}    {cap:>10,.0f} events/s  ({cap / ref:.2f}x reference)")


if __name__ == "__main__":
    main()
