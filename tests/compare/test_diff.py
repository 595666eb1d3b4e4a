from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.diff import close_match, compare, first_divergence

GREEDY = RequestMeta(endpoint="chat", stream=True, deterministic=True, prompt_sha256="0" * 64,
                     prompt_chars=5, max_tokens=16)
SAMPLED = replace(GREEDY, deterministic=False)


def cap(ids: tuple[int, ...] | None = (1, 2, 3, 4), text: str = "abcd", finish: str = "stop",
        **kw: object) -> Capture:
    base = Capture(role="primary", backend="old", status=200, ttft_s=0.1, itl_s=(0.01,) * 3,
                   e2e_s=0.2, output_tokens=len(ids) if ids is not None else None,
                   finish_reason=finish, text=text, token_ids=ids)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_identical_outputs_match() -> None:
    result = compare(cap(), cap(role="shadow"), GREEDY, "shadow")
    assert result.outcome == "match" and result.exact_match
    assert (result.first_divergence, result.edit_distance, result.length_delta) == (None, 0, 0)
    assert result.close_match is True and result.finish_reason_match is True
    assert result.against == "shadow" and result.reason == ""


def test_substitution_divergence_index_and_edit_distance() -> None:
    result = compare(cap((1, 2, 3, 4, 5)), cap((1, 2, 9, 4, 5)), GREEDY, "shadow")
    assert result.outcome == "diverged" and not result.exact_match
    assert (result.first_divergence, result.edit_distance, result.length_delta) == (2, 1, 0)
    assert "first divergence at token 2" in result.reason
    assert result.close_match is None  # no logprobs


def test_longer_output_diverges_at_prefix_end_with_length_and_finish_reason() -> None:
    result = compare(cap((1, 2, 3)), cap((1, 2, 3, 7, 8), finish="length"), GREEDY, "baseline")
    assert (result.first_divergence, result.edit_distance, result.length_delta) == (3, 2, 2)
    assert result.finish_reason_match is False
    assert "finish reason 'stop' vs 'length'" in result.reason


def test_same_tokens_different_finish_reason_is_diverged() -> None:
    result = compare(cap(), cap(finish="length"), GREEDY, "shadow")
    assert result.exact_match and result.outcome == "diverged"


def test_edit_distance_counts_tokens_not_characters() -> None:
    result = compare(cap((10, 20, 30, 40)), cap((10, 30, 40, 50)), GREEDY, "shadow")
    assert result.edit_distance == 2 and result.first_divergence == 1


LOGPROBS = {"sampled_tokens": ("a", "b", "c"),
            "top_logprobs": ({"a": -0.1}, {"b": -0.6, "x": -0.8}, {"c": -0.2})}


def test_close_match_when_each_token_is_in_the_others_top_k() -> None:
    primary = cap((1, 2, 3), **LOGPROBS)
    shadow = cap((1, 9, 3), sampled_tokens=("a", "x", "c"),
                 top_logprobs=({"a": -0.1}, {"x": -0.7, "b": -0.7}, {"c": -0.2}))
    result = compare(primary, shadow, GREEDY, "shadow")
    assert result.outcome == "diverged" and result.close_match is True
    assert "close by vLLM's top-k rule" in result.reason


def test_not_close_when_a_token_is_missing_from_the_other_top_k() -> None:
    primary = cap((1, 2, 3), **LOGPROBS)
    shadow = cap((1, 9, 3), sampled_tokens=("a", "y", "c"),
                 top_logprobs=({"a": -0.1}, {"y": -0.1, "b": -3.0}, {"c": -0.2}))
    assert compare(primary, shadow, GREEDY, "shadow").close_match is False
    assert close_match(primary, shadow, 1) is False


def test_close_match_unknowable_at_prefix_end_or_without_alternatives() -> None:
    primary = cap((1, 2, 3), **LOGPROBS)
    shorter = cap((1, 2), sampled_tokens=("a", "b"), top_logprobs=({"a": -0.1}, {"b": -0.6}))
    assert close_match(primary, shorter, 2) is None
    no_alts = cap((1, 9, 3), sampled_tokens=("a", "x", "c"), top_logprobs=({}, {}, {}))
    assert close_match(primary, no_alts, 1) is None


def test_missing_token_ids_fall_back_to_logprob_tokens_then_text() -> None:
    primary = cap(None, text="hello world", sampled_tokens=("hello", " world"))
    shadow = cap((5, 6), text="hello there", sampled_tokens=("hello", " there"))
    result = compare(primary, shadow, GREEDY, "shadow")
    assert result.first_divergence == 1 and "logprob token strings" in result.reason
    result = compare(cap(None, text="hello world"), cap((5, 6), text="hello there"), GREEDY,
                     "shadow")
    assert result.outcome == "diverged" and result.first_divergence == 6
    assert "text (token ids missing on primary;" in result.reason and result.basis == "text"
    assert "character 6" in result.reason and result.edit_distance == 5
    assert result.close_match is None and result.length_delta is None
    same = compare(cap(None, text="ok"), cap(None, text="ok"), GREEDY, "shadow")
    assert same.outcome == "match" and same.reason == "identical text"


def test_sampled_requests_are_not_comparable_but_keep_distribution_fields() -> None:
    result = compare(cap((1, 2)), cap((3, 4, 5), finish="length"), SAMPLED, "shadow")
    assert result.outcome == "not_comparable" and "sampled" in result.reason
    assert result.length_delta == 1 and result.finish_reason_match is False
    assert result.first_divergence is None and result.edit_distance is None


@pytest.mark.parametrize(("primary", "other", "outcome", "words"), [
    (cap(), cap(error="timeout", status=None), "error", "shadow failed: timeout"),
    (cap(), cap(status=503, error="http_5xx"), "error", "shadow failed: http_5xx"),
    (cap(), cap(status=None), "error", "shadow gave no response"),
    (cap(), cap(status=429), "error", "shadow answered HTTP 429"),
    (cap(status=500), cap(), "not_comparable", "primary answered HTTP 500"),
    (cap(error="reset"), cap(error="reset"), "not_comparable", "primary failed: reset; shadow"),
    (cap(cancelled=True), cap(), "not_comparable", "cancelled (primary)"),
    (cap(), cap(cancelled=True, error="timeout"), "not_comparable", "cancelled (shadow)"),
])
def test_failures_and_cancellations(primary: Capture, other: Capture, outcome: str,
                                    words: str) -> None:
    result = compare(primary, other, GREEDY, "shadow")
    assert result.outcome == outcome and words in result.reason
    assert not result.exact_match and result.first_divergence is None


def test_first_divergence_helper() -> None:
    assert first_divergence((1, 2), (1, 2)) is None
    assert first_divergence((), (1,)) == 0
    assert first_divergence((1, 2, 3), (1, 2)) == 2
    assert first_divergence("abc", "abd") == 2


def test_text_divergence_maps_to_token_index_through_stream_offsets() -> None:
    # shadow streamed "hel"+"lo"+" wor"+"ld": tokens end at characters 3, 5, 9, 11
    shadow = cap((1, 2, 3, 4), text="hello world", token_char_ends=(3, 5, 9, 11), role="shadow")
    primary = cap(None, text="hello there")
    result = compare(primary, shadow, GREEDY, "shadow")
    assert result.first_divergence == 2  # the third token, " wor", is where text differs
    assert "token (via shadow's offsets) 2" in result.reason
    assert compare(cap(None, text="hexxo"), shadow, GREEDY, "shadow").first_divergence == 0
    assert compare(cap(None, text="hello"), shadow, GREEDY, "shadow").first_divergence == 2
