"""`eval perplexity`: the same texts scored by two engines through the completions endpoint.

Each text is tokenized once (the first engine's `/tokenize`; the second must agree, or
the texts are not the same sequences) and cut into windows of at most `max_model_len`
- 1 tokens (one slot left for the single generated token), overlapping by one token so
that every token after the first is scored exactly once, with the one before it as
context at least (lm-evaluation-harness's rolling windows with context 1). A window is
scored with vLLM's `prompt_logprobs`; an engine that refuses it (or `--method echo`) is
asked with `echo` + `logprobs`, as lm-evaluation-harness does over OpenAI-compatible
servers. Perplexity is exp(total NLL / tokens) over the whole set; the two engines are
paired per text and the difference's interval is a paired bootstrap over texts.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import numpy as np

from proxy.evaluate.client import engine_info, session
from proxy.evaluate.jsonl import EvalInputError, read_objects
from proxy.evaluate.results import EngineScore, PerplexityDelta, PerplexityResult
from proxy.gate.verdict import VerdictName

Method = Literal["auto", "prompt_logprobs", "echo"]


@dataclass(frozen=True)
class Scored:
    """One engine's negative log-likelihood per text and the tokens it covers."""

    url: str
    version: str | None
    method: str
    nll: tuple[float, ...]
    tokens: tuple[int, ...]

    @property
    def perplexity(self) -> float:
        return math.exp(math.fsum(self.nll) / max(1, sum(self.tokens)))


def read_texts(path: str) -> list[str]:
    """The texts of `path`: JSONL (`{"text": ...}` per line) when its first non-blank line
    is a JSON object, else plain text, one text per paragraph (blank lines between)."""
    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read()
    except OSError as exc:
        raise EvalInputError(f"cannot read text set {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise EvalInputError(f"{path}: not UTF-8 ({exc.reason})") from None
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")
    texts = _jsonl_texts(path) if first.startswith("{") else paragraphs(content)
    if not texts:
        raise EvalInputError(f"{path}: no texts")
    return texts


def paragraphs(content: str) -> list[str]:
    """Paragraphs separated by blank lines (whitespace-only lines count as blank), each
    with its line breaks kept and surrounding whitespace trimmed."""
    out, lines = [], []
    for line in [*content.splitlines(), ""]:
        if line.strip():
            lines.append(line.rstrip())
        elif lines:
            out.append("\n".join(lines).strip())
            lines = []
    return out


def _jsonl_texts(path: str) -> list[str]:
    texts = []
    for number, obj in read_objects(path, "text set"):
        text = obj.get("text")
        if not isinstance(text, str) or not text:
            raise EvalInputError(f"{path}:{number}: expected {{\"text\": \"...\"}} with a "
                                 f"non-empty string, got keys {sorted(obj)[:8]}")
        texts.append(text)
    return texts


def windows(ids: Sequence[int], max_len: int) -> list[tuple[int, ...]]:
    """Windows of <= max_len - 1 tokens, each starting on the previous one's last token."""
    size = max_len - 1
    if size < 2:
        raise EvalInputError(f"max model length {max_len} leaves no room for a window")
    out, start = [], 0
    while start < len(ids) - 1:
        out.append(tuple(ids[start:start + size]))
        start += size - 1
    return out


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        async with http.post(url, json=body) as resp:
            return resp.status, await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        raise EvalInputError(f"POST {url} failed: {exc or type(exc).__name__}") from None


async def tokenize(http: aiohttp.ClientSession, url: str, model: str, text: str) -> list[int]:
    status, obj = await _post(http, url + "/tokenize", {"model": model, "prompt": text})
    if status != 200 or not isinstance(obj, dict) or not isinstance(obj.get("tokens"), list):
        raise EvalInputError(f"{url}/tokenize answered HTTP {status}: {str(obj)[:200]}")
    return [int(t) for t in obj["tokens"]]


async def score_window(http: aiohttp.ClientSession, url: str, model: str,
                       window: tuple[int, ...], method: str) -> float | None:
    """NLL of tokens 1.. of `window`; None when this method is not available there."""
    body: dict[str, Any] = {"model": model, "prompt": list(window), "max_tokens": 1,
                            "temperature": 0}
    if method == "prompt_logprobs":
        body["prompt_logprobs"] = 0
    else:
        body.update(echo=True, logprobs=0)
    status, obj = await _post(http, url + "/v1/completions", body)
    if status == 400:
        return None
    if status != 200:
        raise EvalInputError(f"{url}/v1/completions answered HTTP {status}: {str(obj)[:200]}")
    try:
        choice = obj["choices"][0]
        if method == "prompt_logprobs":
            entries = choice.get("prompt_logprobs")
            if not entries:
                return None
            return -math.fsum(entries[j][str(window[j])]["logprob"] for j in range(1, len(window)))
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if not logprobs:
            return None
        return -math.fsum(float(x) for x in logprobs[1:len(window)])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EvalInputError(f"{url}: unexpected logprobs in the answer ({exc!r})") from None


async def _score_engine(url: str, model: str, text_windows: list[list[tuple[int, ...]]],
                        method: Method, concurrency: int, timeout_s: float) -> tuple[str, list[float]]:
    slots = asyncio.Semaphore(concurrency)
    async with session(timeout_s, concurrency) as http:
        chosen = method
        if method == "auto":
            probe = await score_window(http, url, model, text_windows[0][0], "prompt_logprobs")
            chosen = "prompt_logprobs" if probe is not None else "echo"

        async def one(window: tuple[int, ...]) -> float:
            async with slots:
                nll = await score_window(http, url, model, window, chosen)
            if nll is None:
                raise EvalInputError(f"{url} gives no logprobs through {chosen} (prompt_logprobs "
                                     "or echo + logprobs are needed)")
            return nll

        per_text = []
        for wins in text_windows:
            per_text.append(math.fsum(await asyncio.gather(*(one(w) for w in wins))))
    return chosen, per_text


async def _tokenized(urls: Sequence[str], texts: Sequence[str],
                     max_len: int | None) -> tuple[list[str], list[list[int]], int]:
    async with session(60.0) as http:
        infos = [await engine_info(http, url) for url in urls]
        models = []
        for info in infos:
            if info.model is None:
                raise EvalInputError(f"{info.url} serves no model")
            models.append(info.model)
        ids = [await tokenize(http, urls[0], models[0], t) for t in texts]
        for url, model in zip(urls[1:], models[1:]):
            for i, text in enumerate(texts):
                if await tokenize(http, url, model, text) != ids[i]:
                    raise EvalInputError(f"text {i + 1} tokenizes differently on {url} than on "
                                         f"{urls[0]}: the engines do not share a tokenizer")
        limit = max_len or min([await _max_model_len(http, url) for url in urls])
    return models, ids, limit


async def _max_model_len(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url + "/v1/models") as resp:
        data = (await resp.json(content_type=None)).get("data") or [{}]
    value = data[0].get("max_model_len")
    if type(value) is not int:
        raise EvalInputError(f"{url}/v1/models gives no max_model_len: pass --max-model-len")
    return value


def evaluate_perplexity(urls: Sequence[str], texts: Sequence[str], *, max_len: int | None,
                        method: Method = "auto", concurrency: int = 4, timeout_s: float = 300.0,
                        confidence: float = 0.95, resamples: int = 2000,
                        max_increase: float = 0.05) -> PerplexityResult:
    """Perplexity per engine and, for two, the paired difference (second - first), judged."""
    models, ids, limit = asyncio.run(_tokenized(urls, texts, max_len))
    text_windows = [windows(t, limit) for t in ids]
    kept = [i for i, w in enumerate(text_windows) if w]
    if not kept:
        raise EvalInputError("every text is a single token: nothing to score")
    tokens = tuple(len(ids[i]) - 1 for i in kept)
    scored = []
    for url, model in zip(urls, models):
        chosen, nll = asyncio.run(_score_engine(url, model, [text_windows[i] for i in kept],
                                                method, concurrency, timeout_s))
        scored.append(Scored(url, None, chosen, tuple(nll), tokens))
    results = [EngineScore(s.url, s.method, s.perplexity) for s in scored]
    delta = paired_delta(scored[0], scored[1], confidence, resamples) \
        if len(scored) == 2 else None
    verdict, reason = perplexity_verdict(results, delta, max_increase)
    return PerplexityResult(
        texts=len(kept), skipped_single_token=len(texts) - len(kept), tokens=sum(tokens),
        windows=sum(len(text_windows[i]) for i in kept), max_model_len=limit,
        results=results, delta=delta, verdict=verdict, reason=reason)


def perplexity_verdict(results: Sequence[EngineScore], delta: PerplexityDelta | None,
                       max_increase: float) -> tuple[VerdictName, str]:
    """Fail when the interval's lower bound is above `max_increase` x old, pass when its
    upper bound is within, else inconclusive; one engine: measured, nothing judged."""
    if delta is None:
        return "pass", "one engine: perplexity measured, nothing compared"
    old = results[0].perplexity
    low, high = delta.ci
    limit = max_increase * old
    text = (f"perplexity {old:.4g} -> {results[1].perplexity:.4g}, delta "
            f"{delta.value:+.4g} ({delta.confidence:.0%} interval {low:+.4g}..{high:+.4g}); "
            f"allowed increase {limit:.4g}")
    if low > limit:
        return "fail", text
    if high <= limit:
        return "pass", text
    return "inconclusive", text


def _perplexity_delta(old_nll: np.ndarray, new_nll: np.ndarray, tokens: np.ndarray,
                      axis: int = -1) -> np.ndarray:
    """new - old perplexity of a set of texts (vectorized over resamples on `axis`)."""
    total = np.sum(tokens, axis=axis)
    return np.exp(np.sum(new_nll, axis=axis) / total) - np.exp(np.sum(old_nll, axis=axis) / total)


def paired_delta(old: Scored, new: Scored, confidence: float, resamples: int,
                 seed: int = 0) -> PerplexityDelta:
    """new - old perplexity with a paired bootstrap interval (texts resampled together),
    bias-corrected and accelerated (scipy's BCa). Where it cannot be computed (one text,
    or every resample the same, as for identical engines) the interval is the value."""
    from scipy.stats import bootstrap  # lazy: heavy import

    value = new.perplexity - old.perplexity
    low = high = value
    if len(old.nll) >= 2:
        data = (np.asarray(old.nll), np.asarray(new.nll), np.asarray(old.tokens, dtype=float))
        with warnings.catch_warnings():  # a degenerate sample: handled below
            warnings.simplefilter("ignore")
            interval = bootstrap(data, _perplexity_delta, paired=True, vectorized=True,
                                 method="BCa", confidence_level=confidence,
                                 n_resamples=resamples,
                                 rng=np.random.default_rng(seed)).confidence_interval
        if math.isfinite(interval.low) and math.isfinite(interval.high):
            low, high = float(interval.low), float(interval.high)
    return PerplexityDelta(value, (low, high), value / old.perplexity, confidence, resamples,
                           "paired bootstrap (BCa)")
