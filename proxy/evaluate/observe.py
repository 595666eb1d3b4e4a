"""What an engine exposes besides answers: its `/metrics`, a Prometheus that scrapes it,
the GPUs (NVML). Each reader returns data or raises EngineUnreachable (an EvalInputError)
naming the URL."""

from __future__ import annotations

import urllib.parse
from typing import Any

from proxy import boundedhttp
from proxy.evaluate.jsonl import EngineUnreachable
from proxy.evaluate.results import GpuReading

# The engine series the Grafana dashboards and `eval memory` read (histograms and
# counters match by prefix: _bucket/_sum/_count/_total).
REQUIRED_VLLM_SERIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:generation_tokens", "vllm:cache_config_info",
)


def http_get(url: str, timeout_s: float = 10.0,
             max_bytes: int = boundedhttp.MAX_ANSWER_BYTES) -> tuple[int, bytes]:
    """(status, body) within `timeout_s` in all and `max_bytes`: AnswerOverLimit beyond
    (no verdict); EngineUnreachable when `url` cannot be reached."""
    try:
        return boundedhttp.get(url, timeout_s, max_bytes)
    except boundedhttp.Unreachable as exc:
        raise EngineUnreachable(str(exc)) from None


def json_of(body: bytes, url: str) -> Any:
    """An answer as JSON; EngineUnreachable naming `url` when not JSON or nested too deep."""
    try:
        return boundedhttp.json_answer(body, url)
    except ValueError as exc:
        raise EngineUnreachable(str(exc)) from None


def engine_samples(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of the engine's `/metrics`."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = http_get(url + "/metrics")
    if status != 200:
        raise EngineUnreachable(f"{url}/metrics answered HTTP {status}")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    except ValueError as exc:
        raise EngineUnreachable(f"{url}/metrics is not Prometheus text: {exc}") from None
    return out


def missing_series(names: set[str], required: tuple[str, ...] = REQUIRED_VLLM_SERIES) -> list[str]:
    suffixes = ("", "_total", "_bucket", "_sum", "_count")
    return [r for r in required if not any(r + s in names for s in suffixes)]


def instance_of(url: str) -> str:
    """host:port of an engine URL, as Prometheus labels its target's `instance`."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def prom_api(prom_url: str, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    status, body = http_get(f"{prom_url.rstrip('/')}{path}" + (f"?{query}" if query else ""))
    doc = json_of(body, f"{prom_url}{path} (HTTP {status})")
    if status != 200 or doc.get("status") != "success":  # not an object: no verdict
        raise EngineUnreachable(f"{prom_url}{path} answered HTTP {status}: {doc.get('error')}")
    return doc["data"]


def prom_target_health(prom_url: str, instance: str) -> list[str]:
    """The health ("up", "down", "unknown") of each active target with this instance."""
    data = prom_api(prom_url, "/api/v1/targets", state="active")
    return [t.get("health", "unknown") for t in data.get("activeTargets", [])
            if t.get("labels", {}).get("instance") == instance]


def prom_series_names(prom_url: str, instance: str) -> set[str]:
    expr = f'count by (__name__) ({{__name__=~"vllm:.+", instance="{instance}"}})'
    result = prom_api(prom_url, "/api/v1/query", query=expr)["result"]
    return {r["metric"]["__name__"] for r in result}


def prom_vector(prom_url: str, expr: str) -> list[float]:
    return [float(r["value"][1]) for r in prom_api(prom_url, "/api/v1/query", query=expr)["result"]]


def nvml_gpus() -> list[GpuReading] | None:
    """Per GPU: index, name, utilisation %, memory used/total bytes; None without NVML."""
    try:
        import pynvml  # optional: nvidia-ml-py (torch's CUDA wheels bring it)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(GpuReading(i, str(pynvml.nvmlDeviceGetName(handle)), float(util.gpu),
                                  int(mem.used), int(mem.total)))
        return out
    finally:
        pynvml.nvmlShutdown()
