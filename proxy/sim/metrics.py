"""The simulator's counters and their Prometheus text (a few of vLLM's `vllm:*` names)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

LATENCY_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass
class Histogram:
    """Cumulative-on-render histogram with fixed buckets."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, value_s: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, value_s)] += 1
        self.total += value_s
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        running = 0
        for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), self.counts):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


@dataclass
class SimStats:
    """Mutable counters of one simulator app (owned by the app, never global)."""

    running: int = 0
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    prompt_tokens: int = 0
    generation_tokens: int = 0
    injected: dict[str, int] = field(
        default_factory=lambda: {"error": 0, "reset": 0, "garbage": 0, "divergence": 0}
    )
    ttft: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)


def render_metrics(stats: SimStats, model: str) -> str:
    labels = f'model_name="{model}",engine="0"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {stats.running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} 0",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} {min(1.0, stats.running / 256)!r}",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{labels}}} {stats.prompt_tokens}",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{labels}}} {stats.generation_tokens}",
        "# TYPE vllm:request_success_total counter",
    ]
    for reason, count in stats.success.items():
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {count}')
    lines.append("# TYPE vllm_sim:injected_faults_total counter")
    for kind, count in stats.injected.items():
        lines.append(f'vllm_sim:injected_faults_total{{{labels},kind="{kind}"}} {count}')
    lines += stats.ttft.lines("vllm:time_to_first_token_seconds", labels)
    lines += stats.itl.lines("vllm:inter_token_latency_seconds", labels)
    lines += stats.e2e.lines("vllm:e2e_request_latency_seconds", labels)
    return "\n".join(lines) + "\n"
