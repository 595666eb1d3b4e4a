"""What `eval` and `verify` find, typed; JSON only at the edge.

Field names and order are the keys of `--json` (README "vllm-cutover eval"): the CLI
writes `dataclasses.asdict` of these, and the text and HTML renderings read the fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.gate.verdict import VerdictName

CheckStatus = Literal["pass", "fail", "n/a"]


@dataclass(frozen=True)
class Recorded:
    """A golden file written by `eval record`."""

    url: str
    version: str | None
    models: list[str]
    requests: int
    output: str


@dataclass(frozen=True)
class LengthStats:
    """Paired output lengths in tokens: totals, their ratio, a Wilcoxon signed-rank test."""

    pairs: int
    old_total: int
    new_total: int
    ratio: float | None
    shorter: int
    longer: int
    wilcoxon_p: float
    old_quantiles: dict[str, float | None]
    new_quantiles: dict[str, float | None]


@dataclass(frozen=True)
class FinishStats:
    """Requests whose finish reason changed, by transition (`length->stop`: count)."""

    pairs: int
    changed: int
    transitions: dict[str, int]


@dataclass(frozen=True)
class DivergenceSummary:
    count: int
    min: int | None
    median: float | None
    max: int | None
    positions: list[int]


@dataclass(frozen=True)
class BaselineSummary:
    """The baseline (a second old engine) against the golden: old-vs-old noise."""

    compared: int
    diverged: int
    close: int
    match_rate: float | None
    lengths: LengthStats
    finish_reasons: FinishStats


@dataclass(frozen=True)
class RequestRow:
    source: str
    outcome: str
    first_divergence: int | None
    close: bool | None
    old_tokens: int | None
    new_tokens: int | None
    old_finish: str | None
    new_finish: str | None
    reason: str | None
    field: str | None = None  # the field that diverged first (proxy.compare.fields)
    choice: int | None = None  # on which choice


@dataclass(frozen=True)
class EngineSummary:
    url: str
    version: str | None
    models: list[str]


@dataclass(frozen=True)
class Engines:
    golden: EngineSummary
    new: EngineSummary
    baseline: EngineSummary | None


@dataclass(frozen=True)
class CompareResult:
    """`eval compare`'s verdict and its evidence; `engines` and `warnings` are set once
    the engines are known (by `replaying.compare_golden`)."""

    verdict: VerdictName
    reasons: list[str]
    compared: int
    diverged: int
    close: int
    match_rate: float | None
    match_rate_ci: tuple[float, float]
    first_divergence: DivergenceSummary
    lengths: LengthStats
    finish_reasons: FinishStats
    errors: dict[str, int]
    baseline: BaselineSummary | None
    gate: dict[str, Any] | None  # the live gate's match-rate details (`gate.evaluate`)
    requests: list[RequestRow]
    engines: Engines | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EngineScore:
    url: str
    method: str
    perplexity: float


@dataclass(frozen=True)
class PerplexityDelta:
    """new - old perplexity, its interval, and the interval's settings."""

    value: float
    ci: tuple[float, float]
    relative: float
    confidence: float
    resamples: int
    method: str


@dataclass(frozen=True)
class PerplexityResult:
    """`eval perplexity`'s result; its fields are the keys of `--json`."""

    texts: int
    skipped_single_token: int
    tokens: int
    windows: int
    max_model_len: int
    results: list[EngineScore]
    delta: PerplexityDelta | None
    verdict: VerdictName
    reason: str


@dataclass(frozen=True)
class PerfLevel:
    """One concurrency of `eval perf`: each engine's figures (`perf.Run.as_json`: counts,
    throughputs, a latency summary per metric) and, for two, the new/old ratios."""

    concurrency: int
    engines: list[dict[str, Any]]
    ratios: dict[str, float | None] | None


@dataclass(frozen=True)
class PerfResult:
    tool: str  # whose load: "vllm-cutover" (our client) or "vllm bench serve"
    urls: list[str]
    levels: list[PerfLevel]
    verdict: VerdictName
    reason: str


@dataclass(frozen=True)
class KvCache:
    """An engine's KV cache, the labels of vLLM's `vllm:cache_config_info` (None where it
    does not say) and its use now (`vllm:kv_cache_usage_perc`, 1 = full)."""

    num_gpu_blocks: float | str | None
    block_size: float | str | None
    kv_cache_size_tokens: float | str | None
    kv_cache_memory_bytes: float | str | None
    cache_dtype: float | str | None
    gpu_memory_utilization: float | str | None
    kv_cache_max_concurrency: float | str | None
    usage: float | None


@dataclass(frozen=True)
class ContainerMemory:
    container: str
    usage_bytes: int | None
    limit_bytes: int | None


@dataclass(frozen=True)
class EngineMemory:
    url: str
    kv_cache: KvCache
    container: ContainerMemory | None


@dataclass(frozen=True)
class GpuReading:
    """One GPU as NVML reads it."""

    index: int
    name: str
    util_percent: float
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class MemoryResult:
    """`eval memory`'s result; `kv_tokens_ratio` (new/old KV tokens) with two engines."""

    engines: list[EngineMemory]
    gpus: list[GpuReading] | str  # a string says why there are none
    verdict: VerdictName
    reason: str
    kv_tokens_ratio: float | None = None


@dataclass(frozen=True)
class CheckLine:
    """One line of `verify`'s checklist."""

    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True)
class Checklist:
    url: str
    checks: list[CheckLine]
    verdict: Literal["pass", "fail"]
