"""An answer with every text replaced by its keyed hash, for golden files without text.

Each field the comparison reads (proxy.compare.fields: reasoning, content/text, refusal,
tool-call names and arguments, finish and stop reason, Responses status) becomes
HMAC-SHA256 under the golden file's own random key (as proxy.evidence.record_hash keys the records'
hashes): equal values hash alike in that file, a guessed text cannot be confirmed with a
plain sha256, nor matched across files. Tool-call arguments are hashed as canonical JSON
where they parse, so key order and spaces still do not count. Empty fields stay empty
(nothing to hide). `compare_answers` on two digested answers names the field and choice
that differ, without a position.

Token ids give the text back through the tokenizer, so they are kept the same way: one
keyed hash per block of `ID_BLOCK_TOKENS` ids, each chained to the one before
(`digest_ids`). The first block that differs places a divergence within 16 tokens; a
hash confirms a guess of a whole block given everything before it, never one token
(a per-token hash would: a vocabulary is small enough to try every entry).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence

from proxy.capture.answer import Answer, ChoiceAnswer, ToolCall
from proxy.compare.fields import canonical_json

KEY_BYTES = 32
ID_BLOCK_TOKENS = 16


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def digest_answer(answer: Answer, key: bytes) -> Answer:
    """`answer` with each text field its keyed hash (an already digested one as it is)."""
    if answer.digested:
        return answer

    def h(value: str | None) -> str | None:
        if not value:
            return value
        # "h:" keeps a digest from ever parsing as JSON (arguments compare as strings).
        return "h:" + hmac.new(key, value.encode("utf-8", "replace"),
                               hashlib.sha256).hexdigest()

    def call(c: ToolCall) -> ToolCall:
        return ToolCall(h(c.name) or "", h(canonical_json(c.arguments) or c.arguments) or "")

    choices = tuple(ChoiceAnswer(
        c.choice, h(c.content) or "", h(c.reasoning) or "", h(c.refusal) or "",
        tuple(call(t) for t in c.tool_calls), h(c.finish_reason), h(c.stop_reason))
        for c in answer.choices)
    return Answer(answer.kind, choices, h(answer.status), h(answer.incomplete_reason), True)


def digest_ids(ids: Sequence[int], key: bytes) -> tuple[int, ...]:
    """Chained keyed hashes of `ids`, one per block of ID_BLOCK_TOKENS (the last one may be
    shorter), each as a 64-bit integer: equal prefixes of blocks hash alike."""
    out: list[int] = []
    chain = b""
    for start in range(0, len(ids), ID_BLOCK_TOKENS):
        block = ",".join(str(i) for i in ids[start:start + ID_BLOCK_TOKENS])
        chain = hmac.new(key, chain + b"ids:" + block.encode(), hashlib.sha256).digest()
        out.append(int.from_bytes(chain[:8], "big"))
    return tuple(out)
