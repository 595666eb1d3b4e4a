"""The golden file: the old engine's answers to a fixed request set (JSON Lines).

Line 1 is a header (`{"golden": FORMAT, "engine": {...}, ...}`: the engine's URL,
version and model); each further line one request with the answer as the proxy's
`Capture` knows it (finish reason, length, timings, and what gives its text). The
request holds the user's prompt (it is their set); the answer itself is kept only
with `--store-text`: its text, token ids, sampled tokens and top-k logprobs. Without
it the answer's fields are kept as keyed hashes (proxy.compare.digest) under a random
key in the header (`digest_key`), its token ids as chained keyed hashes of 16-id blocks
(`token_id_blocks`), and no logprobs (their token strings are the text): `eval compare`
still names the field and choice that diverged first and the 16 tokens it diverged in,
not vLLM's top-k closeness; with text, the full answer (the exact position, closeness).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from proxy.capture.answer import Answer as ClientAnswer
from proxy.capture.answer import answer_from_json, answer_json
from proxy.capture.types import Capture, Role
from proxy.compare.digest import ID_BLOCK_TOKENS, digest_answer, digest_ids, new_key
from proxy.credentials import without_credentials
from proxy.evaluate.client import Answer, EngineInfo
from proxy.evaluate.jsonl import EvalInputError, read_objects, write_objects
from proxy.evaluate.prompts import EvalRequest, endpoint_of

FORMAT = 1
MAX_TOKEN_ID = 2**31 - 1  # vocabularies are far smaller; an id beyond is not one


@dataclass(frozen=True)
class GoldenEntry:
    request: EvalRequest
    capture: Capture
    started_s: float
    digest_key: bytes | None = None  # the file's key when its answers are digested
    id_blocks: tuple[int, ...] | None = None  # digest_ids of the ids (a file without text)


@dataclass(frozen=True)
class Golden:
    engine: EngineInfo
    created_unix: float
    entries: tuple[GoldenEntry, ...]


def capture_json(cap: Capture, store_text: bool,
                 digest_key: bytes | None = None) -> dict[str, Any]:
    """`cap` for the golden file: the answer in full with `store_text`, else its fields'
    and its token ids' keyed hashes under `digest_key` (none without a key)."""
    answer: ClientAnswer | None = cap.answer
    blocks = None
    if not store_text:
        if answer is not None:
            answer = None if digest_key is None else digest_answer(answer, digest_key)
        if cap.token_ids is not None and digest_key is not None:
            blocks = [f"{b:016x}" for b in digest_ids(cap.token_ids, digest_key)]
    return {
        "status": cap.status, "error": cap.error, "finish_reason": cap.finish_reason,
        "output_tokens": cap.output_tokens,
        # Ids and logprobs give the text back (a tokenizer decodes ids; the logprobs'
        # token strings are the text): kept only with --store-text.
        "token_ids": cap.token_ids if store_text else None,
        "token_id_blocks": blocks,
        "top_logprobs": cap.top_logprobs if store_text else None,
        "sampled_tokens": cap.sampled_tokens if store_text else None,
        "ttft_s": cap.ttft_s, "itl_s": cap.itl_s, "e2e_s": cap.e2e_s,
        "text": cap.text if store_text else None,
        # Every field and choice, for the field comparison (text: only with --store-text).
        "answer": None if answer is None else answer_json(answer),
    }


def capture_from_json(obj: dict[str, Any], role: Role, backend: str) -> Capture:
    """A stored answer back as a Capture; ValueError naming the field on a bad shape:
    token ids are JSON integers (not 1793.5, "1793" or true), lengths and times are
    non-negative numbers."""
    ids = obj["token_ids"]
    top = obj.get("top_logprobs")
    sampled = obj.get("sampled_tokens")
    if ids is not None and not (isinstance(ids, list) and all(_is_int(i) for i in ids)):
        raise ValueError(f"token_ids must be a list of JSON integers, got {str(ids)[:80]}")
    for i, token in enumerate(ids or ()):
        if not 0 <= token <= MAX_TOKEN_ID:
            shown = token if abs(token) < 10**12 else f"an integer of {len(str(token))} digits"
            raise ValueError(f"token_ids[{i}] must be a token id in 0..{MAX_TOKEN_ID}, "
                             f"got {shown}")
    if top is not None and not (isinstance(top, list) and all(
            d is None or (isinstance(d, dict) and all(_is_number(v) for v in d.values()))
            for d in top)):
        raise ValueError(f"top_logprobs must be a list of {{token: number}}, got "
                         f"{str(top)[:80]}")
    if sampled is not None and not (isinstance(sampled, list)
                                    and all(isinstance(t, str) for t in sampled)):
        raise ValueError(f"sampled_tokens must be a list of strings, got {str(sampled)[:80]}")
    itl = obj.get("itl_s") or []
    if not isinstance(itl, list) or not all(_is_number(x) and x >= 0 for x in itl):
        raise ValueError(f"itl_s must be a list of seconds >= 0, got {str(itl)[:80]}")
    if not _is_int(obj["status"]):
        raise ValueError(f"status must be an integer, got {obj['status']!r}")
    for name in ("output_tokens", "ttft_s", "e2e_s"):
        value = obj.get(name)
        ok = _is_int(value) if name == "output_tokens" else _is_number(value)
        if value is not None and not (ok and value >= 0):
            raise ValueError(f"{name} must be a non-negative "
                             f"{'integer' if name == 'output_tokens' else 'number'}, "
                             f"got {value!r}")
    for name in ("finish_reason", "text", "error"):
        if not isinstance(obj.get(name), (str, type(None))):
            raise ValueError(  # noqa: TRY004 - read_golden reports ValueError as bad input
                f"{name} must be a string or null, got {obj.get(name)!r}")
    return Capture(
        role=role, backend=backend, status=obj["status"], ttft_s=obj.get("ttft_s"),
        itl_s=tuple(float(x) for x in itl), e2e_s=obj.get("e2e_s"),
        output_tokens=obj.get("output_tokens"), finish_reason=obj.get("finish_reason"),
        text=obj.get("text") or "",
        token_ids=None if ids is None else tuple(ids),
        top_logprobs=None if top is None else tuple(
            {str(k): float(v) for k, v in (d or {}).items()} for d in top),
        sampled_tokens=None if sampled is None else tuple(sampled),
        error=obj.get("error"),
        answer=answer_from_json(obj.get("answer")),
    )


def check_lengths(obj: dict[str, Any], choices: int) -> tuple[int, ...] | None:
    """The answer's `token_id_blocks` (as digest_ids gives them), after checking that its
    ids or blocks cover `output_tokens` (one choice: usage counts only its tokens)."""
    raw = obj.get("token_id_blocks")
    blocks = None
    if raw is not None:
        if not isinstance(raw, list) or not all(
                isinstance(b, str) and len(b) == 16 and _is_hex(b) for b in raw):
            raise ValueError(f"token_id_blocks must be a list of 16 hex digits each, got "
                             f"{str(raw)[:80]}")
        blocks = tuple(int(b, 16) for b in raw)
    count, ids = obj.get("output_tokens"), obj.get("token_ids")
    if choices != 1 or count is None:
        return blocks
    if ids is not None and len(ids) != count:
        raise ValueError(f"output_tokens is {count} but token_ids holds {len(ids)} ids")
    if blocks is not None and len(blocks) != -(-count // ID_BLOCK_TOKENS):
        raise ValueError(f"output_tokens is {count} but token_id_blocks holds {len(blocks)} "
                         f"blocks of {ID_BLOCK_TOKENS} ids")
    return blocks


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def write_golden(path: str, engine: EngineInfo, requests: list[EvalRequest],
                 answers: list[Answer], store_text: bool) -> None:
    header = {"golden": FORMAT, "created_unix": time.time(),
              "engine": {"url": without_credentials(engine.url), "version": engine.version,
                         "models": list(engine.models)}}
    key = None if store_text else new_key()
    if key is not None:
        header["digest_key"] = key.hex()
    lines = [header]
    for request, answer in zip(requests, answers, strict=True):
        lines.append({"source": request.source, "endpoint": request.endpoint,
                      "request": request.body, "started_s": round(answer.started_s, 6),
                      "answer": capture_json(answer.capture, store_text, key)})
    write_objects(path, lines)


def read_golden(path: str) -> Golden:
    """The golden file; EvalInputError names the line of anything malformed."""
    rows = iter(read_objects(path, "golden file"))
    first = next(rows, None)
    if first is None:
        raise EvalInputError(f"{path}: empty golden file")
    number, header = first
    if header.get("golden") != FORMAT or not isinstance(header.get("engine"), dict):
        raise EvalInputError(f"{path}:{number}: not a golden file of format {FORMAT} "
                             f"(header {str(header)[:80]!r}); record it with `eval record`")
    eng = header["engine"]
    engine = EngineInfo(str(eng.get("url")), eng.get("version"),
                        tuple(str(m) for m in eng.get("models") or ()))
    try:
        key = None if header.get("digest_key") is None else bytes.fromhex(header["digest_key"])
    except (TypeError, ValueError):
        raise EvalInputError(f"{path}:{number}: digest_key is not hex") from None
    entries = []
    for number, obj in rows:
        source = f"{path}:{number}"
        try:
            body = obj["request"]
            if not isinstance(body, dict):
                raise TypeError("request is not an object")
            endpoint = endpoint_of(body, source)
            request = EvalRequest(endpoint, body, str(obj.get("source") or source))
            capture = capture_from_json(obj["answer"], "primary", "golden")
            n = body.get("n")
            blocks = check_lengths(obj["answer"], n if type(n) is int and n > 0 else 1)
            digested = blocks is not None or (capture.answer is not None
                                              and capture.answer.digested)
            if digested and key is None:
                raise ValueError("digested answer but no digest_key in the header")
            entries.append(GoldenEntry(request, capture, float(obj.get("started_s") or 0.0),
                                       key, blocks))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, EvalInputError):
                raise
            detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise EvalInputError(f"{source}: malformed golden entry: {detail}") from None
    if not entries:
        raise EvalInputError(f"{path}: the golden file holds no requests")
    return Golden(engine, float(header.get("created_unix") or 0.0), tuple(entries))
