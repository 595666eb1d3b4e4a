"""`eval record` and `eval compare` end to end: check the engines, replay, judge.

The engines are checked before any request is sent: reachable, serving the golden's
model, a baseline of the golden's own version (old-vs-old noise means the same old).
Every answer must carry token ids and top-k logprobs: without them the comparison
would silently fall back to text, so an engine that does not give them is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from proxy.capture.types import Role
from proxy.evaluate.client import Answer, EngineInfo, engine_info, replay, session
from proxy.evaluate.golden import Golden, write_golden
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.judge import CompareCriteria, judge
from proxy.evaluate.prompts import EvalRequest
from proxy.evaluate.results import CompareResult, Engines, EngineSummary, Recorded

Pace = Literal["fast", "recorded"]


@dataclass(frozen=True)
class ReplaySettings:
    concurrency: int = 4
    rate: float = 0.0  # requests/s; 0: as fast as the concurrency allows
    pace: Pace = "fast"
    speed: float = 1.0  # recorded pace sped up by this factor
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency!r}")
        if self.rate < 0 or self.speed <= 0 or self.timeout_s <= 0:
            raise ValueError(f"rate >= 0, speed > 0 and timeout > 0 needed, got "
                             f"{self.rate!r}, {self.speed!r}, {self.timeout_s!r}")


async def _info(url: str) -> EngineInfo:
    async with session(30.0) as http:
        return await engine_info(http, url)


def engine_infos(urls: Sequence[str]) -> list[EngineInfo]:
    return [asyncio.run(_info(url)) for url in urls]


def with_model(requests: Sequence[EvalRequest], info: EngineInfo,
               ignore_eos: bool = False) -> list[EvalRequest]:
    """Fill a missing `model` with the engine's; a model it does not serve is refused."""
    out = []
    for request in requests:
        if ignore_eos:
            request = replace(request, body={**request.body, "ignore_eos": True})
        model = request.body.get("model")
        if model is None:
            if info.model is None:
                raise EvalInputError(f"{info.url} serves no model (/v1/models is empty)")
            request = replace(request, body={**request.body, "model": info.model})
        elif model not in info.models:
            raise EvalInputError(f"{request.source}: model {model!r} is not served by "
                                 f"{info.url} (it serves {list(info.models)})")
        out.append(request)
    return out


def _check_answers(answers: Sequence[Answer], requests: Sequence[EvalRequest],
                   url: str, strict: bool) -> None:
    """Refuse answers without token ids or logprobs; failed requests too when `strict`
    (a golden file is all answers), else they are counted as the new engine's errors."""
    for request, answer in zip(requests, answers, strict=True):
        cap = answer.capture
        if cap.error is not None or cap.status is None or cap.status >= 400:
            if not strict:
                continue
            status = "no answer" if cap.status is None else f"HTTP {cap.status}"
            raise EvalInputError(f"{request.source}: {url} failed ({status}, {cap.error}): "
                                 f"{answer.detail.strip()[:200]}")
        if request.endpoint == "responses":
            continue  # compared on fields only (the Responses API gives no token ids)
        if cap.token_ids is None:
            raise EvalInputError(f"{request.source}: {url} returned no token ids "
                                 "(return_token_ids needs vLLM 0.10.2 or later)")
        if cap.top_logprobs is None or (cap.token_ids and not any(cap.top_logprobs)):
            raise EvalInputError(f"{request.source}: {url} returned no logprobs; the "
                                 "comparison needs top-k logprobs (vLLM --max-logprobs)")


def record(url: str, requests: Sequence[EvalRequest], out_path: str,
           settings: ReplaySettings, store_text: bool = False) -> Recorded:
    """Send the set to the old engine and write the golden file (atomically)."""
    info = asyncio.run(_info(url))
    requests = with_model(requests, info)
    answers = asyncio.run(replay(url, requests, "primary", concurrency=settings.concurrency,
                                 rate=settings.rate, timeout_s=settings.timeout_s))
    _check_answers(answers, requests, url, strict=True)
    write_golden(out_path, info, list(requests), answers, store_text)
    return Recorded(url, info.version, list(info.models), len(requests), out_path)


def check_engines(golden: Golden, new: EngineInfo, baseline: EngineInfo | None,
                  allow_mismatch: bool) -> list[str]:
    """Refusals (or, with `allow_mismatch`, warnings) about the engines against the golden."""
    problems = []
    wanted = {e.request.body.get("model") for e in golden.entries}
    for label, info in (("new", new), ("baseline", baseline)):
        if info is None:
            continue
        missing = sorted(str(m) for m in wanted if m not in info.models)
        if missing:
            problems.append(f"the golden file is of model {missing} but the {label} engine "
                            f"{info.url} serves {list(info.models)}")
    if baseline is not None and baseline.version != golden.engine.version:
        problems.append(f"the golden file was recorded on vLLM {golden.engine.version} but the "
                        f"baseline {baseline.url} runs {baseline.version}: old-vs-old noise "
                        "needs the old version")
    if problems and not allow_mismatch:
        raise EvalInputError("; ".join(problems) + " (--allow-model-mismatch compares anyway)")
    return problems


def _aimed_at(golden: Golden, info: EngineInfo) -> list[EvalRequest]:
    """The golden's requests, renamed to the engine's model where it serves another."""
    out = []
    for entry in golden.entries:
        request = entry.request
        if request.body.get("model") not in info.models and info.model is not None:
            request = replace(request, body={**request.body, "model": info.model})
        out.append(request)
    return out


async def _replay_all(golden: Golden, targets: list[tuple[EngineInfo, Role]],
                      settings: ReplaySettings) -> list[list[Answer]]:
    offsets = None
    if settings.pace == "recorded":
        offsets = [e.started_s / settings.speed for e in golden.entries]
    return list(await asyncio.gather(*(
        replay(info.url, _aimed_at(golden, info), role, concurrency=settings.concurrency,
               rate=settings.rate, offsets_s=offsets, timeout_s=settings.timeout_s)
        for info, role in targets)))


def compare_golden(golden: Golden, url: str, baseline_url: str | None,
                   settings: ReplaySettings, criteria: CompareCriteria,
                   allow_mismatch: bool = False) -> CompareResult:
    """Replay the golden's requests on the new engine (and a baseline) and judge them."""
    new = asyncio.run(_info(url))
    base = asyncio.run(_info(baseline_url)) if baseline_url else None
    warnings = check_engines(golden, new, base, allow_mismatch)
    targets: list[tuple[EngineInfo, Role]] = [(new, "shadow")]
    if base is not None:
        targets.append((base, "baseline"))
    results = asyncio.run(_replay_all(golden, targets, settings))
    requests = [e.request for e in golden.entries]
    for (info, _), answers in zip(targets, results):
        if all(a.capture.error is not None or (a.capture.status or 500) >= 400
               for a in answers):
            _check_answers(answers[:1], requests[:1], info.url, strict=True)
        _check_answers(answers, requests, info.url, strict=False)
    out = judge(golden.entries, [a.capture for a in results[0]],
                [a.capture for a in results[1]] if base is not None else None, criteria)
    engines = Engines(_summary(golden.engine), _summary(new),
                      None if base is None else _summary(base))
    return replace(out, engines=engines, warnings=warnings)


def _summary(info: EngineInfo) -> EngineSummary:
    return EngineSummary(info.url, info.version, list(info.models))
