"""Compare a shadow (or baseline) capture with the primary's for one request (no I/O).

Deterministic requests (greedy or seeded) are compared token by token: exact
equality, first divergence, Levenshtein distance over tokens, finish reason and
length; where both sides returned logprobs, vLLM's closeness rule from its test
suite (`check_logprobs_close`): at the first divergence each side's token is in
the other's top-k. Sequences used, best first: token ids, the token strings of
logprobs, then the text (positions are then characters; `reason` says so).
Sampled requests are only comparable as distributions and get `not_comparable`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

__all__ = ["close_match", "compare", "first_divergence", "main_field"]

from rapidfuzz.distance import Levenshtein

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.fields import FieldDiff, compare_answers
from proxy.compare.fields import first_difference as first_divergence
from proxy.compare.types import Comparison


def compare(primary: Capture, other: Capture, meta: RequestMeta, against: Role,
            id_block: int = 1) -> Comparison:
    """`other` (shadow or baseline) against `primary` for the request described by `meta`.
    `id_block` > 1: each side's `token_ids` are keyed hashes of that many ids each (a golden
    file without text, proxy.compare.digest.digest_ids): a divergence is placed in a block."""
    failure = _failure(primary, other, against)
    if failure is not None:
        outcome, reason = failure
        return Comparison(against, outcome, False, None, None, None, None, None, reason)
    finish_match = primary.finish_reason == other.finish_reason
    if not meta.deterministic:
        return Comparison(
            against, "not_comparable", False, None, None,
            _length_delta(primary, other, None), finish_match, None,
            "sampled request: compared as distributions only",
        )
    seq_p, seq_o, basis, note = _sequences(primary, other, against)
    divergence = first_divergence(seq_p, seq_o)
    exact = divergence is None
    distance: int | None = 0 if exact else Levenshtein.distance(seq_p, seq_o)
    reasons = [note] if note else []
    unit = "token"
    blocks = id_block > 1 and basis == "token_ids"
    if basis == "text" and divergence is not None:
        divergence, unit = _char_to_token(primary, other, divergence, against)
    close: bool | None = True
    if not exact:
        close = close_match(primary, other, divergence) if unit == "token" else None
    if blocks and divergence is not None:
        divergence, distance, close = divergence * id_block, None, None
        reasons.append(f"first divergence in tokens {divergence}..{divergence + id_block - 1} "
                       f"(ids kept as keyed hashes of {id_block}-token blocks)")
    elif not exact:
        reasons.append(f"first divergence at {unit} {divergence}")
        if close is not None:
            reasons.append("close by vLLM's top-k rule" if close else "not within top-k")
    fields = _field_diffs(primary, other, basis)
    if not finish_match and not any(d.field == "finish_reason" for d in fields):
        reasons.append(f"finish reason {primary.finish_reason!r} vs {other.finish_reason!r}")
    reasons += [d.detail if d.choice == 0 else f"choice {d.choice}: {d.detail}"
                for d in fields]
    first = _first_field(fields, exact, basis, primary)
    return Comparison(
        against=against,
        outcome="match" if exact and finish_match and not fields else "diverged",
        exact_match=exact,
        first_divergence=divergence,
        edit_distance=distance,
        length_delta=_length_delta(primary, other,
                                   None if basis == "text" or blocks else (seq_p, seq_o)),
        finish_reason_match=finish_match,
        close_match=close,
        reason="; ".join(reasons),
        basis=first.basis if first is not None else basis,
        field=first.field if first is not None else None,
        choice=first.choice if first is not None else None,
    )


def _field_diffs(primary: Capture, other: Capture, basis: str) -> list[FieldDiff]:
    """The fields that differ as the client received them (proxy.compare.fields), plus
    the sampled tokens of the logprobs where both sides have them."""
    fields = []
    if primary.answer is not None and other.answer is not None:
        fields = compare_answers(primary.answer, other.answer)
    if basis != "logprob_tokens" and primary.sampled_tokens is not None \
            and other.sampled_tokens is not None:
        at = first_divergence(primary.sampled_tokens, other.sampled_tokens)
        if at is not None:
            fields.append(FieldDiff("logprobs", 0, "logprob_tokens", at,
                                    f"logprobs' sampled tokens differ at token {at}"))
    return fields


def _first_field(fields: list[FieldDiff], exact: bool, basis: str,
                 primary: Capture) -> FieldDiff | None:
    """The field that diverged first: a token divergence is choice 0's content unless an
    earlier field (its reasoning) differs, or no field does (the ids alone differ)."""
    if exact or (fields and fields[0].field not in ("content", "text")):
        return fields[0] if fields else None
    return FieldDiff(main_field(primary), 0, basis, None, "")


def main_field(capture: Capture) -> str:
    """The text field of choice 0 as the client names it."""
    return "text" if capture.answer is not None and capture.answer.kind == "completions" \
        else "content"


def close_match(primary: Capture, other: Capture, index: int | None) -> bool | None:
    """vLLM's rule at `index`: each side's token is in the other's top-k; None if unknowable."""
    if index is None:
        return True
    tokens_p, tokens_o = primary.sampled_tokens, other.sampled_tokens
    top_p, top_o = primary.top_logprobs, other.top_logprobs
    if tokens_p is None or tokens_o is None or top_p is None or top_o is None:
        return None
    if index >= min(len(tokens_p), len(tokens_o), len(top_p), len(top_o)):
        return None  # one side stopped there: no token to look up
    if not top_p[index] or not top_o[index]:
        return None  # top_logprobs=0 was asked: no alternatives returned
    return tokens_p[index] in top_o[index] and tokens_o[index] in top_p[index]


def _failure(primary: Capture, other: Capture, against: Role) -> tuple[Any, str] | None:
    if primary.cancelled or other.cancelled:
        who = "primary" if primary.cancelled else against
        return "not_comparable", f"cancelled ({who})"
    failed_p, failed_o = _failed(primary), _failed(other)
    if failed_p is not None:
        also = f"; {against} {failed_o}" if failed_o is not None else ""
        return "not_comparable", f"primary {failed_p}{also}"
    if failed_o is not None:
        return "error", f"{against} {failed_o}"
    return None


def _failed(capture: Capture) -> str | None:
    if capture.error is not None:
        return f"failed: {capture.error}"
    if capture.status is None:
        return "gave no response"
    if capture.status >= 400:
        return f"answered HTTP {capture.status}"
    return None


def _sequences(
    primary: Capture, other: Capture, against: Role
) -> tuple[Sequence[Any], Sequence[Any], str, str]:
    """(primary sequence, other sequence, basis, note for the reason)."""
    if primary.token_ids is not None and other.token_ids is not None:
        return primary.token_ids, other.token_ids, "token_ids", ""
    if primary.text == other.text:
        return primary.text, other.text, "text", "identical text"
    if primary.sampled_tokens is not None and other.sampled_tokens is not None:
        return primary.sampled_tokens, other.sampled_tokens, "logprob_tokens", (
            "compared logprob token strings (token ids missing)")
    missing = " and ".join(
        side for side, cap in (("primary", primary), (against, other)) if cap.token_ids is None
    )
    return primary.text, other.text, "text", (
        f"compared text (token ids missing on {missing}; edit distance in characters)")


def _char_to_token(
    primary: Capture, other: Capture, char_index: int, against: Role
) -> tuple[int, str]:
    """Map a text divergence to a token index through a side's per-token text offsets.

    Text before `char_index` is identical on both sides, so the tokens that ended
    there are the matching prefix on either side.
    """
    for side, cap in (("primary", primary), (against, other)):
        if cap.token_char_ends is not None and cap.token_ids is not None:
            return bisect_right(cap.token_char_ends, char_index), f"token (via {side}'s offsets)"
    return char_index, "character"


def _length_delta(
    primary: Capture, other: Capture, seqs: tuple[Sequence[Any], Sequence[Any]] | None
) -> int | None:
    if primary.output_tokens is not None and other.output_tokens is not None:
        return other.output_tokens - primary.output_tokens
    if seqs is not None:
        return len(seqs[1]) - len(seqs[0])
    return None
