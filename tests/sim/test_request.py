from __future__ import annotations

import pytest

from proxy.sim.request import RequestError, chat_prompt, parse_request
from proxy.sim.vocab import build_vocab

VOCAB = build_vocab()


def test_completion_fields() -> None:
    spec = parse_request(
        "completions",
        {
            "prompt": "hi there",
            "max_tokens": 7,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": 3,
            "return_token_ids": True,
            "stop": "x",
        },
        VOCAB,
        4096,
    )
    assert spec.deterministic and spec.stream and spec.include_usage
    assert (spec.max_tokens, spec.logprobs, spec.stop) == (7, 3, ("x",))
    assert spec.prompt_ids == tuple(VOCAB.tokenize("hi there"))


def test_default_temperature_is_sampled_and_seed_makes_it_deterministic() -> None:
    body = {"prompt": "a"}
    assert not parse_request("completions", body, VOCAB, 4096).deterministic
    assert parse_request("completions", {**body, "seed": 3}, VOCAB, 4096).deterministic


def test_chat_uses_the_template_and_chat_logprobs() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hey"}]}]
    spec = parse_request(
        "chat",
        {"messages": messages, "logprobs": True, "top_logprobs": 2, "max_completion_tokens": 4},
        VOCAB,
        4096,
    )
    assert spec.prompt_ids == tuple(VOCAB.tokenize(chat_prompt(messages)))
    assert (spec.logprobs, spec.max_tokens) == (2, 4)


def test_same_prompt_same_key_different_prompt_different_key() -> None:
    a = parse_request("completions", {"prompt": "x y"}, VOCAB, 4096)
    b = parse_request("completions", {"prompt": "x y", "max_tokens": 3}, VOCAB, 4096)
    c = parse_request("completions", {"prompt": "x z"}, VOCAB, 4096)
    assert a.prompt_key == b.prompt_key != c.prompt_key


@pytest.mark.parametrize(
    ("body", "quoted"),
    [
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "a", "max_tokens": "5"}, "'5'"),
        ({"prompt": "a", "temperature": -1}, "-1"),
        ({"prompt": "a", "logprobs": 21}, "21"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": ["a", "b"]}, "one prompt"),
        ([1, 2], "list"),
    ],
)
def test_invalid_requests_are_400_and_quote_the_value(body: object, quoted: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request("completions", body, VOCAB, 4096)
    assert info.value.status == 400 and quoted in info.value.message


def test_prompt_longer_than_the_context_is_refused() -> None:
    with pytest.raises(RequestError, match="maximum context length is 8"):
        parse_request("completions", {"prompt": "abcdefghij"}, VOCAB, 8)


def test_chat_needs_messages() -> None:
    with pytest.raises(RequestError, match="messages"):
        parse_request("chat", {"messages": []}, VOCAB, 4096)
