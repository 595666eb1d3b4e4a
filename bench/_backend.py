"""A minimal, fast OpenAI-compatible SSE backend for the benchmark (raw asyncio, HTTP/1.1).

Used when the project's own simulator (`vllm-cutover sim`) is not wanted or not there
(`--backend inline`). It answers POST /v1/completions and /v1/chat/completions with
`max_tokens` deterministic tokens, streamed (one chunked-encoding chunk per SSE event,
as vLLM sends them) or not, after `--ttft-ms`, one token every `--itl-ms`. GET
/_bench/answers says how many generation answers it wrote to the end (a mirror target's
count shows how many mirrors a relay really delivered). Any other path answers a small
JSON document (/health, /version, /v1/models, /tokenize).

Run: python bench/_backend.py --port P [--ttft-ms 0] [--itl-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time

_MODEL = "sim"


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Conn(asyncio.Protocol):
    """One keep-alive client connection: parse requests, stream answers."""

    def __init__(self, ttft_s: float, itl_s: float, answers: list[int]) -> None:
        self._answers = answers  # shared by the server's connections: [answers written whole]
        self._ttft_s = ttft_s
        self._itl_s = itl_s
        self._buf = b""
        self._transport: asyncio.Transport | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._queue: asyncio.Queue[tuple[bytes, bytes] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._can_write.set()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self._buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            rest = self._buf[end + 4 :]
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body, consumed = _dechunk(rest)
                if consumed < 0:
                    return
            else:
                length = int(headers.get("content-length", "0"))
                if len(rest) < length:
                    return
                body, consumed = rest[:length], length
            self._buf = rest[consumed:]
            self._queue.put_nowait((lines[0].encode("latin-1"), body))

    async def _serve(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None or self._transport is None:
                return
            request_line, body = item
            path = request_line.split(b" ")[1] if b" " in request_line else b"/"
            if path.startswith((b"/v1/completions", b"/v1/chat/completions")):
                await self._generate(body, chat=path.startswith(b"/v1/chat"))
            elif path.startswith(b"/tokenize"):
                self._write_json(200, _tokenize(body))
            elif path.startswith(b"/_bench/answers"):
                self._write_json(200, {"answers": self._answers[0]})
            else:
                self._write_json(200, {"status": "ok", "version": "0.0.0-bench"})

    def _write_json(self, status: int, obj: object) -> None:
        payload = json.dumps(obj).encode()
        head = (
            b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (status, len(payload))
        )
        if self._transport is not None:
            self._transport.write(head + payload)

    async def _generate(self, body: bytes, chat: bool) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            self._write_json(400, {"error": {"message": "invalid JSON"}})
            return
        n_tokens = int(request.get("max_tokens") or 16)
        stream = bool(request.get("stream"))
        started = time.time()
        if self._ttft_s > 0:
            await asyncio.sleep(self._ttft_s)
        texts = [f" t{i}" for i in range(n_tokens)]
        if not stream:
            await asyncio.sleep(self._itl_s * max(0, n_tokens - 1))
            self._write_json(200, _full(request, texts, chat, started))
            self._answers[0] += 1
            return
        transport = self._transport
        if transport is None:
            return
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunks = _rendered(
            n_tokens, chat, str(request.get("model", _MODEL)), bool(request.get("return_token_ids"))
        )
        for i, chunk in enumerate(chunks):
            if i and self._itl_s > 0:
                await asyncio.sleep(self._itl_s)
            if not self._can_write.is_set():
                await self._can_write.wait()
            if self._transport is None:
                return
            transport.write(chunk)
        transport.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self._answers[0] += 1


def answer_events(n_tokens: int, chat: bool = False, model: str = _MODEL,
                  token_ids: bool = False) -> tuple[bytes, ...]:
    """The SSE events of one streamed answer, as this backend sends them ([DONE] apart)."""
    request = {"model": model, "return_token_ids": token_ids}
    return tuple(
        _event(_delta(request, f" t{i}", i, "length" if i == n_tokens - 1 else None, chat))
        for i in range(n_tokens)
    )


@functools.lru_cache(maxsize=64)
def _rendered(n_tokens: int, chat: bool, model: str, token_ids: bool) -> tuple[bytes, ...]:
    """The chunked-encoded events of one answer: rendered once, so serving costs only writes."""
    return tuple(_chunk(e) for e in answer_events(n_tokens, chat, model, token_ids))


def _delta(request: dict, text: str, index: int, finish: str | None, chat: bool) -> dict:
    choice: dict[str, object] = {"index": 0, "logprobs": None, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text} if index else {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if request.get("return_token_ids"):
        choice["token_ids"] = [1000 + index]
    return {
        "id": "cmpl-bench",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1700000000,
        "model": request.get("model", _MODEL),
        "choices": [choice],
    }


def full_answer(n_tokens: int, chat: bool = False, model: str = _MODEL) -> bytes:
    """The JSON body of one unstreamed answer, as this backend sends it."""
    texts = [f" t{i}" for i in range(n_tokens)]
    return json.dumps(_full({"model": model}, texts, chat, 1700000000)).encode()


def _full(request: dict, texts: list[str], chat: bool, created: float) -> dict:
    text = "".join(texts)
    choice: dict[str, object] = {"index": 0, "logprobs": None, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": "cmpl-bench",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(created),
        "model": request.get("model", _MODEL),
        "choices": [choice],
        "usage": {"completion_tokens": len(texts), "prompt_tokens": 1},
    }


def _tokenize(body: bytes) -> dict:
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        request = {}
    words = str(request.get("prompt", "")).split()
    return {"count": len(words), "max_model_len": 4096, "tokens": [hash(w) % 32000 for w in words]}


def _dechunk(data: bytes) -> tuple[bytes, int]:
    """Decode a complete chunked body; (-1) as consumed when more bytes are needed."""
    out: list[bytes] = []
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return b"", -1
        size = int(data[pos:eol].split(b";")[0], 16)
        if len(data) < eol + 2 + size + 2:
            return b"", -1
        if size == 0:
            return b"".join(out), eol + 4
        out.append(data[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


async def serve(host: str, port: int, ttft_ms: float, itl_ms: float) -> None:
    loop = asyncio.get_running_loop()
    answers = [0]
    server = await loop.create_server(
        lambda: _Conn(ttft_ms / 1000, itl_ms / 1000, answers), host, port, backlog=4096
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(args.host, args.port, args.ttft_ms, args.itl_ms))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
