"""The shared vLLM fixtures themselves: real servers on the tiny models, reused by spec.

Uses the specs the proxy's end-to-end suite uses too (plain and perturbed model under one
served name), so in a full run these servers are started once for both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.servers import complete
from tests.e2e.vllm_servers import VllmServerFactory, VllmSpec

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

PROMPTS = ("The quick brown fox", "Hello world, this is", "Paris is the capital of")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_perturbed_model_shares_tokenizer_not_weights(
    tiny_model: Path, tiny_models: Callable[..., Path]
) -> None:
    perturbed = tiny_models(perturb=1)
    assert perturbed != tiny_model
    assert _digest(perturbed / "tokenizer.json") == _digest(tiny_model / "tokenizer.json")
    assert _digest(perturbed / "model.safetensors") != _digest(tiny_model / "model.safetensors")
    assert tiny_models() == tiny_model  # cached, not rebuilt


def test_servers_answer_and_perturbed_one_computes_differently(
    vllm_servers: VllmServerFactory, tiny_model: Path, tiny_models: Callable[..., Path]
) -> None:
    plain, perturbed = vllm_servers.start_many(
        [VllmSpec(tiny_model), VllmSpec(tiny_models(perturb=1))]
    )
    assert plain.port != perturbed.port

    def tokens(url: str, prompt: str) -> list[int]:
        return list(complete(url, "tiny", prompt=prompt, max_tokens=8)["choices"][0]["token_ids"])

    plain_tokens = [tokens(plain.url, p) for p in PROMPTS]
    assert all(len(t) == 8 for t in plain_tokens)
    assert [tokens(plain.url, p) for p in PROMPTS] == plain_tokens  # greedy is repeatable
    assert [tokens(perturbed.url, p) for p in PROMPTS] != plain_tokens
    assert vllm_servers.start(tiny_model) == plain  # same spec: the running server
