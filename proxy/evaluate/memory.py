"""`eval memory`: KV-cache capacity and use per engine, container memory, GPU memory.

vLLM 0.32 exports its cache configuration as the labels of `vllm:cache_config_info`
(`num_gpu_blocks`, `block_size`, `kv_cache_size_tokens`, `kv_cache_memory_bytes`,
`cache_dtype`, `gpu_memory_utilization`, `kv_cache_max_concurrency`) and its use as
`vllm:kv_cache_usage_perc` (1 = full). A new version that reserves less KV cache for
the same settings serves fewer requests at once: that is the check.
"""

from __future__ import annotations

from typing import Any

from proxy.evaluate import observe
from proxy.evaluate.jsonl import EvalInputError

CACHE_LABELS = ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "kv_cache_memory_bytes",
                "cache_dtype", "gpu_memory_utilization", "kv_cache_max_concurrency")


def _number(text: str | None) -> float | str | None:
    if text is None or text == "None":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def kv_cache(url: str) -> dict[str, Any]:
    samples = observe.engine_samples(url)
    info = samples.get("vllm:cache_config_info")
    if not info:
        raise EvalInputError(f"{url}/metrics has no vllm:cache_config_info (vLLM 0.6 or later)")
    labels = info[0][0]
    out: dict[str, Any] = {k: _number(labels.get(k)) for k in CACHE_LABELS}
    usage = samples.get("vllm:kv_cache_usage_perc") or samples.get("vllm:gpu_cache_usage_perc")
    out["usage"] = max(v for _, v in usage) if usage else None
    return out


def container_memory(container: str) -> dict[str, Any]:
    """The container's memory use and limit from Docker's stats (one sample)."""
    import docker  # lazy: only with --container

    try:
        stats = docker.from_env().containers.get(container).stats(stream=False)
    except docker.errors.DockerException as exc:
        raise EvalInputError(f"--container {container!r}: {exc}") from None
    mem = stats.get("memory_stats") or {}
    return {"container": container, "usage_bytes": mem.get("usage"), "limit_bytes": mem.get("limit")}


def memory_report(urls: list[str], containers: list[str], max_kv_drop: float) -> dict[str, Any]:
    engines = []
    for i, url in enumerate(urls):
        entry: dict[str, Any] = {"url": url, "kv_cache": kv_cache(url), "container": None}
        if i < len(containers):
            entry["container"] = container_memory(containers[i])
        engines.append(entry)
    gpus = observe.nvml_gpus()
    out: dict[str, Any] = {"engines": engines,
                           "gpus": gpus if gpus else "n/a: no GPU seen (no NVML)",
                           "verdict": "pass", "reason": "one engine: nothing compared"}
    if len(engines) == 2:
        old, new = (e["kv_cache"].get("kv_cache_size_tokens") for e in engines)
        if not isinstance(old, float) or not isinstance(new, float) or old <= 0:
            out["verdict"], out["reason"] = "inconclusive", "KV-cache size in tokens not known"
        else:
            change = new / old
            out["kv_tokens_ratio"] = change
            failed = change < 1 - max_kv_drop
            out["verdict"] = "fail" if failed else "pass"
            out["reason"] = (f"KV cache {old:.0f} -> {new:.0f} tokens (x{change:.3f}); "
                             f"allowed drop {max_kv_drop:g}")
    return out
