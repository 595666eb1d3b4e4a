"""A tiny random Llama model that a real vLLM CPU server can load (no download needed).

Run as a script with an interpreter that has transformers + tokenizers (the vLLM venv):
    python tests/e2e/tiny_model.py --out DIR [--seed N] [--perturb N]
From test code (any interpreter), `ensure_tiny_model()` builds it once into the cache,
keyed by seed and perturbation, by running this file with the given interpreter.

`perturb=0` is the plain model; `perturb=N>0` adds seeded noise to every weight of the
same model (same tokenizer): a server on it "computes differently", which the proxy's
end-to-end tests must catch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Bump when the recipe changes so caches do not serve an old model.
RECIPE_VERSION = 1
PERTURB_STD = 0.05
INIT_STD = 0.2

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A cutover moves traffic from the old server to the new one without an outage.",
    "The shadow server receives a copy of each request and its answer is compared.",
    "Tokens, latency and errors are measured for both versions of the engine.",
    "Hello world, this is a tiny language model used only for tests.",
    "One two three four five six seven eight nine ten eleven twelve.",
    "Paris is the capital of France and Berlin is the capital of Germany.",
    "def main(): return 0  # code also appears in prompts",
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def cache_root() -> Path:
    """$VLLM_CUTOVER_CACHE, default ~/.cache/vllm-cutover."""
    default = Path.home() / ".cache" / "vllm-cutover"
    return Path(os.environ.get("VLLM_CUTOVER_CACHE", default))


def model_dir_name(seed: int, perturb: int) -> str:
    return f"tiny-llama-r{RECIPE_VERSION}-s{seed}-p{perturb}"


def ensure_tiny_model(
    python: str, *, seed: int = 0, perturb: int = 0, cache: Path | None = None
) -> Path:
    """Path of the cached model for (seed, perturb), building it with `python` if missing."""
    root = (cache or cache_root()) / "models"
    target = root / model_dir_name(seed, perturb)
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    # Build beside the target, then rename: a concurrent session never sees half a model.
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        cmd = [python, str(Path(__file__).resolve()), "--out", str(tmp),
               "--seed", str(seed), "--perturb", str(perturb)]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build(out: Path, seed: int, perturb: int) -> None:
    """Write tokenizer + bf16 safetensors weights of the (optionally perturbed) model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(SENTENCES, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # head_dim 16 fails on vLLM's CPU attention
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        initializer_range=INIT_STD,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if perturb:
        gen = torch.Generator().manual_seed(10_000 + perturb)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=gen) * PERTURB_STD)
    model = model.to(torch.bfloat16)
    model.generation_config.do_sample = False
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--perturb", type=int, default=0)
    args = parser.parse_args()
    build(args.out, args.seed, args.perturb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
