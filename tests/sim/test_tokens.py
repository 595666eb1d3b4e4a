from __future__ import annotations

from dataclasses import replace

from proxy.sim.config import SimConfig
from proxy.sim.request import SamplingSpec, parse_request
from proxy.sim.tokens import candidates, generate, top_logprobs
from proxy.sim.vocab import build_vocab

VOCAB = build_vocab()
CONFIG = SimConfig()


def spec(prompt: str = "hello", **fields: object) -> SamplingSpec:
    body = {"prompt": prompt, "temperature": 0, **fields}
    return parse_request("completions", body, VOCAB, CONFIG.max_model_len)


def test_deterministic_requests_repeat_and_depend_on_the_prompt() -> None:
    a = generate(VOCAB, CONFIG, spec(), 0, nonce=1)
    b = generate(VOCAB, CONFIG, spec(), 0, nonce=2)
    c = generate(VOCAB, CONFIG, spec("other"), 0, nonce=1)
    assert a.token_ids == b.token_ids != c.token_ids


def test_shorter_max_tokens_gives_a_prefix_and_length_finish() -> None:
    full = generate(VOCAB, CONFIG, spec(ignore_eos=True, max_tokens=40), 0, 0)
    short = generate(VOCAB, CONFIG, spec(max_tokens=5), 0, 0)
    assert len(full.token_ids) == 40 and full.finish_reason == "length"
    assert short.token_ids == full.token_ids[:5] and short.finish_reason == "length"


def test_natural_stop_inside_the_configured_range() -> None:
    config = replace(CONFIG, min_natural_tokens=3, max_natural_tokens=6)
    gen = generate(VOCAB, config, spec(max_tokens=100), 0, 0)
    assert gen.finish_reason == "stop" and 3 <= len(gen.token_ids) <= 6


def test_sampled_requests_differ_by_nonce_and_seeded_ones_by_seed() -> None:
    sampled = spec(temperature=1.0)
    assert not sampled.deterministic
    a = generate(VOCAB, CONFIG, sampled, 0, 1).token_ids
    b = generate(VOCAB, CONFIG, sampled, 0, 2).token_ids
    assert a != b
    s1 = generate(VOCAB, CONFIG, spec(temperature=1.0, seed=1), 0, 5).token_ids
    s2 = generate(VOCAB, CONFIG, spec(temperature=1.0, seed=1), 0, 6).token_ids
    s3 = generate(VOCAB, CONFIG, spec(temperature=1.0, seed=2), 0, 6).token_ids
    assert s1 == s2 != s3


def test_divergence_at_a_fixed_index_keeps_the_prefix_and_is_close() -> None:
    diverging = replace(CONFIG, divergence_rate=1.0, divergence_at=4)
    request = spec(max_tokens=12, ignore_eos=True, logprobs=5)
    base = generate(VOCAB, CONFIG, request, 0, 0)
    other = generate(VOCAB, diverging, request, 0, 0)
    assert other.diverged_at == 4 and base.diverged_at is None
    assert other.token_ids[:4] == base.token_ids[:4]
    assert other.token_ids[4] != base.token_ids[4]
    # vLLM's closeness rule: each side's token at the divergence is in the other's top-k.
    base_top = [t for t, _ in top_logprobs(VOCAB, base, 4, 5)]
    other_top = [t for t, _ in top_logprobs(VOCAB, other, 4, 5)]
    assert other.token_ids[4] in base_top and base.token_ids[4] in other_top
    assert base_top[0] == base.token_ids[4] and other_top[0] == other.token_ids[4]


def test_divergence_rate_selects_about_that_fraction_of_prompts() -> None:
    diverging = replace(CONFIG, divergence_rate=0.25)
    hits = sum(
        generate(VOCAB, diverging, spec(f"prompt {i}", max_tokens=8), 0, 0).diverged_at is not None
        for i in range(400)
    )
    assert 60 <= hits <= 140


def test_sampled_requests_never_diverge_on_purpose() -> None:
    diverging = replace(CONFIG, divergence_rate=1.0)
    assert generate(VOCAB, diverging, spec(temperature=0.7), 0, 3).diverged_at is None


def test_stop_string_truncates_with_stop_reason() -> None:
    free = generate(VOCAB, CONFIG, spec(max_tokens=30, ignore_eos=True), 0, 0)
    word = VOCAB.texts[free.token_ids[6]]
    stopped = generate(VOCAB, CONFIG, spec(max_tokens=30, ignore_eos=True, stop=[word]), 0, 0)
    assert stopped.finish_reason == "stop" and stopped.stop_reason == word
    assert len(stopped.token_ids) <= 6 and word not in VOCAB.text_of(stopped.token_ids)


def test_logprobs_descend_and_candidates_are_distinct() -> None:
    gen = generate(VOCAB, CONFIG, spec(max_tokens=3), 0, 0)
    ranked = top_logprobs(VOCAB, gen, 1, 4)
    assert [lp for _, lp in ranked] == sorted((lp for _, lp in ranked), reverse=True)
    picks = candidates(VOCAB, gen.key, 1, gen.token_ids[1])
    assert len(set(picks)) == len(picks)
