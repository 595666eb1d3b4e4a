"""The simulator's tokenizer: a fixed vocabulary of byte and word tokens.

Ids 0-255 are raw bytes (the fallback for any text the word list does not
cover), so `detokenize(tokenize(text)) == text` for every string; the word
tokens carry a leading space like a BPE vocabulary and include multi-byte
UTF-8 words, so generated streams exercise UTF-8 handling downstream.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

BYTE_TOKENS = 256
_CONSONANTS = "bcdfghklmnprstvz"
_VOWELS = "aeiou"
_PLAIN_WORDS = (
    "the",
    "model",
    "token",
    "upgrade",
    "kernel",
    "shadow",
    "latency",
    "stream",
    "server",
    "version",
    "answer",
    "quick",
    "brown",
    "fox",
    "river",
    "cloud",
)
_UNICODE_WORDS = ("café", "naïve", "über", "東京", "данные", "🙂", "→", "ß")
_PUNCTUATION = (".", ",", "!", "?", ";", ":")
# Roughly one generated token in this many is punctuation.
PUNCT_EVERY = 9
_PIECE_RE = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


def _syllable_words(count: int) -> list[str]:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words: list[str] = []
    for length in (1, 2, 3):
        for combo in itertools.product(syllables, repeat=length):
            words.append("".join(combo))
            if len(words) >= count:
                return words
    return words


@dataclass(frozen=True)
class Vocab:
    """Token id <-> text, plus each token's JSON encoding (used by the SSE templates)."""

    texts: tuple[str, ...]
    word_ids: tuple[int, ...]  # ids the generator draws words from
    punct_ids: tuple[int, ...]
    json_texts: tuple[str, ...] = field(repr=False)
    json_bytes: tuple[bytes, ...] = field(repr=False)
    index: dict[str, int] = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.texts)

    def token_text(self, token_id: int) -> str:
        return self.texts[token_id]

    def token_bytes(self, token_id: int) -> bytes:
        if token_id < BYTE_TOKENS:
            return bytes((token_id,))
        return self.texts[token_id].encode()

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _PIECE_RE.findall(text):
            token_id = self.index.get(piece)
            if token_id is not None:
                ids.append(token_id)
            else:
                ids.extend(piece.encode())
        return ids

    def detokenize(self, token_ids: Iterable[int]) -> str:
        out = bytearray()
        for token_id in token_ids:
            if not 0 <= token_id < len(self.texts):
                raise ValueError(
                    f"token id {token_id!r} is outside the vocabulary (0..{self.size - 1})"
                )
            out += self.token_bytes(token_id)
        return out.decode("utf-8", errors="replace")

    def text_of(self, token_ids: Sequence[int]) -> str:
        """Generated text (generated ids are never byte tokens)."""
        texts = self.texts
        return "".join(texts[t] for t in token_ids)


def build_vocab(word_count: int = 2000) -> Vocab:
    texts: list[str] = [bytes((b,)).decode("latin-1") for b in range(BYTE_TOKENS)]
    words = [" " + w for w in (*_PLAIN_WORDS, *_UNICODE_WORDS)]
    words += [" " + w for w in _syllable_words(word_count - len(words))]
    first_word = len(texts)
    texts += words
    first_punct = len(texts)
    texts += _PUNCTUATION
    texts.append("\n")
    index = {t: i for i, t in enumerate(texts) if i >= BYTE_TOKENS}
    json_texts = tuple(json.dumps(t, ensure_ascii=False) for t in texts)
    return Vocab(
        texts=tuple(texts),
        word_ids=tuple(range(first_word, first_punct)),
        punct_ids=tuple(range(first_punct, first_punct + len(_PUNCTUATION))),
        json_texts=json_texts,
        json_bytes=tuple(j.encode() for j in json_texts),
        index=index,
    )
