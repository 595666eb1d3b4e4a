"""Which ids two answers are compared on (`proxy.compare.token_ids`), rule by rule, by
value: the exchange only fetches what the plan asks for."""

from __future__ import annotations

from dataclasses import replace

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare import token_ids

GREEDY = RequestMeta("completions", True, True, "0" * 64, 5, 16)
SAMPLED = replace(GREEDY, deterministic=False)


def cap(role: Role, text: str = "hello", *, ids: tuple[int, ...] | None = None,
        tokens: int | None = 2, error: str | None = None) -> Capture:
    return Capture(role, role, 200, 0.1, (), 0.2, tokens, "stop", text, ids, error=error)


def test_ids_the_client_saw_are_used_as_they_are() -> None:
    primary = cap("primary", ids=(1, 2))
    chosen = token_ids.plan(GREEDY, primary, [("shadow", cap("shadow"))])
    assert (chosen.source, chosen.texts) == ("client", frozenset())
    assert token_ids.apply(chosen, [("shadow", cap("shadow"))], None)[:2] == ("client", primary)


def test_equal_texts_need_no_tokenizer_and_lend_the_primary_its_length() -> None:
    primary = cap("primary", tokens=None)
    others = [("shadow", cap("shadow", tokens=7)), ("baseline", cap("baseline", tokens=None))]
    chosen = token_ids.plan(GREEDY, primary, others)
    assert chosen.texts == frozenset() and chosen.source == "equal_text"
    source, got, _ = token_ids.apply(chosen, others, None)
    assert source == "equal_text" and got.output_tokens == 7


def test_equal_texts_with_no_length_anywhere_are_tokenized() -> None:
    primary = cap("primary", tokens=None)
    others = [("shadow", cap("shadow", tokens=None))]
    chosen = token_ids.plan(GREEDY, primary, others)
    assert chosen.texts == {"hello"} and chosen.source == "tokenize"
    source, got, rest = token_ids.apply(chosen, others, {"hello": (5, 6, 7)})
    assert source == "tokenize" and got.token_ids == (5, 6, 7) and got.output_tokens == 3
    assert rest[0][1].token_ids == (5, 6, 7)


def test_different_texts_are_tokenized_on_the_primary_and_a_failure_compares_text() -> None:
    primary = cap("primary", "a b")
    others = [("shadow", cap("shadow", "a c")), ("baseline", cap("baseline", error="timeout"))]
    chosen = token_ids.plan(GREEDY, primary, others)
    assert chosen.texts == {"a b", "a c"}  # not the failed side's
    source, got, rest = token_ids.apply(chosen, others, {"a b": (1, 2), "a c": (1, 3)})
    assert source == "tokenize" and got.token_ids == (1, 2) and got.output_tokens == 2
    assert rest[0][1].token_ids == (1, 3) and rest[1][1].token_ids is None
    assert token_ids.apply(chosen, others, None) == ("none", primary, others)


def test_sampled_or_unanswered_exchanges_are_not_token_compared() -> None:
    for meta, primary, others in (
            (SAMPLED, cap("primary"), [("shadow", cap("shadow"))]),
            (GREEDY, cap("primary", error="reset"), [("shadow", cap("shadow"))]),
            (GREEDY, cap("primary"), [("shadow", cap("shadow", error="timeout"))]),
            (None, cap("primary"), [("shadow", cap("shadow"))])):
        chosen = token_ids.plan(meta, primary, others)
        assert (chosen.source, chosen.texts) == ("none", frozenset())


def test_a_primary_without_usage_is_counted_even_when_not_compared() -> None:
    primary = cap("primary", "one two", tokens=None)
    chosen = token_ids.plan(SAMPLED, primary, [("shadow", cap("shadow"))])
    assert chosen.texts == {"one two"} and chosen.count_only
    source, got, _ = token_ids.apply(chosen, [], {"one two": (4, 5)})
    assert source == "none" and got.output_tokens == 2 and got.token_ids is None
    assert token_ids.apply(chosen, [], None)[1].output_tokens is None  # tokenizer down
