from __future__ import annotations

import pytest

from proxy.sim.vocab import BYTE_TOKENS, build_vocab

VOCAB = build_vocab()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world",
        " the model café 東京 🙂!",
        "tabs\tand\n\nnewlines  ",
        "ünïcödé∑ Ω",
        "12 34.5",
    ],
)
def test_detokenize_inverts_tokenize(text: str) -> None:
    assert VOCAB.detokenize(VOCAB.tokenize(text)) == text


def test_known_words_are_single_tokens_and_unknown_fall_back_to_bytes() -> None:
    ids = VOCAB.tokenize(" the model")
    assert len(ids) == 2 and all(i >= BYTE_TOKENS for i in ids)
    assert VOCAB.tokenize("xq") == [ord("x"), ord("q")]


def test_generated_text_tokenizes_back_to_the_same_ids() -> None:
    ids = list(VOCAB.word_ids[:50]) + [VOCAB.punct_ids[0]] + list(VOCAB.word_ids[-20:])
    assert VOCAB.tokenize(VOCAB.text_of(ids)) == ids


def test_detokenize_rejects_ids_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="99999"):
        VOCAB.detokenize([99999])


def test_json_texts_match_texts() -> None:
    import json

    assert all(json.loads(j) == t for j, t in zip(VOCAB.json_texts, VOCAB.texts))
    assert any(
        len(VOCAB.token_bytes(i)) > len(VOCAB.texts[i]) for i in VOCAB.word_ids
    )  # multi-byte
