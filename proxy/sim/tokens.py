"""Deterministic token generation with injectable divergence (pure: values in, values out).

A deterministic request (temperature 0 or a seed) draws its tokens from a PRNG
seeded by the prompt hash (and the seed), so every simulator with the same
`--seed` answers it identically and a shorter `max_tokens` gives a prefix. A
diverging request takes, at the divergence index, the second candidate of
that position (so vLLM's top-k closeness rule holds) and continues from a
different PRNG stream.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Literal

from proxy.sim.config import SimConfig
from proxy.sim.request import SamplingSpec
from proxy.sim.vocab import PUNCT_EVERY, Vocab

FinishReason = Literal["stop", "length"]
TOP_CANDIDATES = 21


def _hash64(*parts: bytes | str | int | None) -> int:
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part if isinstance(part, bytes) else repr(part).encode())
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big")


def _unit(*parts: bytes | str | int | None) -> float:
    return _hash64(*parts) / 2.0**64


@dataclass(frozen=True)
class Generation:
    """One choice's output: ids, why it ended, and where (if) it was made to diverge."""

    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    stop_reason: str | int | None
    key: int  # PRNG seed of the undiverged stream (also seeds the logprob candidates)
    diverged_at: int | None = None
    diverged_key: int | None = None


def _draw(vocab: Vocab, seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    words, punct = vocab.word_ids, vocab.punct_ids
    out: list[int] = []
    for value in rng.choices(range(len(words) * PUNCT_EVERY), k=count):
        word, slot = divmod(value, PUNCT_EVERY)
        # Punctuation never opens an answer nor follows punctuation.
        if slot == 0 and out and out[-1] not in punct:
            out.append(punct[word % len(punct)])
        else:
            out.append(words[word])
    return out


def candidates(vocab: Vocab, key: int, position: int, chosen: int) -> list[int]:
    """Top candidates at one position, best first; `chosen` is always first."""
    rng = random.Random(_hash64(key, "candidates", position))
    picks = [chosen]
    words = vocab.word_ids
    while len(picks) < TOP_CANDIDATES:
        candidate = words[rng.randrange(len(words))]
        if candidate not in picks:
            picks.append(candidate)
    return picks


def _apply_stops(
    vocab: Vocab, spec: SamplingSpec, tokens: list[int]
) -> tuple[list[int], str | int | None]:
    if spec.stop_token_ids:
        stops = set(spec.stop_token_ids)
        for i, token in enumerate(tokens[spec.min_tokens :], start=spec.min_tokens):
            if token in stops:
                return tokens[:i], token
    if spec.stop:
        text = ""
        for i, token in enumerate(tokens):
            text += vocab.texts[token]
            if i < spec.min_tokens:
                continue
            for stop in spec.stop:
                if stop in text:
                    return tokens[:i], stop
    return tokens, None


def generate(
    vocab: Vocab, config: SimConfig, spec: SamplingSpec, choice: int, nonce: int
) -> Generation:
    """Tokens for choice `choice`; `nonce` only matters for sampled requests."""
    if spec.deterministic:
        key = _hash64(spec.prompt_key, spec.seed, choice)
    else:
        key = _hash64(spec.prompt_key, "sampled", nonce, choice)
    limit = config.max_model_len - len(spec.prompt_ids)
    if spec.max_tokens is not None:
        limit = min(limit, spec.max_tokens)
    span = config.max_natural_tokens - config.min_natural_tokens + 1
    natural = config.min_natural_tokens + _hash64(key, "length") % span
    natural = max(natural, spec.min_tokens)
    finish: FinishReason
    if spec.ignore_eos or natural >= limit:
        count, finish = limit, "length"
    else:
        count, finish = natural, "stop"
    diverged_at = diverged_key = None
    if (
        spec.deterministic
        and config.divergence_rate > 0
        and _unit(config.seed, "diverge", key) < config.divergence_rate
    ):
        position = config.divergence_at
        if position is None:
            position = _hash64(config.seed, "position", key) % max(1, count)
        if position < count:
            diverged_at, diverged_key = position, _hash64(config.seed, "diverged", key)
            if finish == "stop":
                count = max(position + 1, count + _hash64(diverged_key) % 7 - 3)
    if diverged_at is None or diverged_key is None:
        tokens = _draw(vocab, key, count)
    else:
        tokens = _draw(vocab, key, diverged_at + 1)
        tokens[diverged_at] = candidates(vocab, key, diverged_at, tokens[diverged_at])[1]
        tokens += _draw(vocab, diverged_key, count - diverged_at - 1)
    tokens, stop_reason = _apply_stops(vocab, spec, tokens)
    if stop_reason is not None:
        finish = "stop"
    return Generation(
        token_ids=tuple(tokens),
        finish_reason=finish,
        stop_reason=stop_reason,
        key=key,
        diverged_at=diverged_at if diverged_at is not None and diverged_at < len(tokens) else None,
        diverged_key=diverged_key,
    )


def top_logprobs(vocab: Vocab, gen: Generation, position: int, k: int) -> list[tuple[int, float]]:
    """(token id, logprob) of the sampled token then the k best alternatives, descending."""
    token = gen.token_ids[position]
    if gen.diverged_at is not None and gen.diverged_key is not None and position >= gen.diverged_at:
        if position == gen.diverged_at:
            original = _draw(vocab, gen.key, position + 1)[position]
            ranked = candidates(vocab, gen.key, position, original)
            ranked[0], ranked[1] = ranked[1], ranked[0]
        else:
            ranked = candidates(vocab, gen.diverged_key, position, token)
    else:
        ranked = candidates(vocab, gen.key, position, token)
    top = -0.02 - (_hash64(gen.key, "lp", position) % 1000) / 2000.0
    return [(tid, round(top - 0.9 * rank, 4)) for rank, tid in enumerate(ranked[: max(k, 1)])]
