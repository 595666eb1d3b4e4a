"""`eval memory`: KV-cache capacity and use per engine, container memory, GPU memory.

vLLM 0.32 exports its cache configuration as the labels of `vllm:cache_config_info`
(`num_gpu_blocks`, `block_size`, `kv_cache_size_tokens`, `kv_cache_memory_bytes`,
`cache_dtype`, `gpu_memory_utilization`, `kv_cache_max_concurrency`) and its use as
`vllm:kv_cache_usage_perc` (1 = full). A new version that reserves less KV cache for
the same settings serves fewer requests at once: that is the check.
"""

from __future__ import annotations

from dataclasses import fields

from proxy.evaluate import observe
from proxy.evaluate.containers import ContainerReader, container_memory, docker_containers
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.results import EngineMemory, KvCache, MemoryResult

CACHE_LABELS = tuple(f.name for f in fields(KvCache) if f.name != "usage")


def _number(text: str | None) -> float | str | None:
    if text is None or text == "None":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def kv_cache(url: str) -> KvCache:
    samples = observe.engine_samples(url)
    info = samples.get("vllm:cache_config_info")
    if not info:
        raise EvalInputError(f"{url}/metrics has no vllm:cache_config_info (vLLM 0.6 or later)")
    labels = info[0][0]
    usage = samples.get("vllm:kv_cache_usage_perc") or samples.get("vllm:gpu_cache_usage_perc")
    return KvCache(**{k: _number(labels.get(k)) for k in CACHE_LABELS},
                   usage=max(v for _, v in usage) if usage else None)


def memory_report(urls: list[str], containers: list[str], max_kv_drop: float,
                  reader: ContainerReader | None = None) -> MemoryResult:
    """Each engine's KV cache (and container memory, in the order of `urls`), the GPUs;
    fail when the second engine's KV cache holds more than `max_kv_drop` fewer tokens."""
    if containers and reader is None:
        reader = docker_containers()
    engines = []
    for i, url in enumerate(urls):
        box = container_memory(reader, containers[i]) \
            if i < len(containers) and reader is not None else None
        engines.append(EngineMemory(url, kv_cache(url), box))
    gpus = observe.nvml_gpus() or "n/a: no GPU seen (no NVML)"
    if len(engines) < 2:
        return MemoryResult(engines, gpus, "pass", "one engine: nothing compared")
    old, new = (e.kv_cache.kv_cache_size_tokens for e in engines)
    if not isinstance(old, float) or not isinstance(new, float) or old <= 0:
        return MemoryResult(engines, gpus, "inconclusive", "KV-cache size in tokens not known")
    change = new / old
    return MemoryResult(engines, gpus, "fail" if change < 1 - max_kv_drop else "pass",
                        f"KV cache {old:.0f} -> {new:.0f} tokens (x{change:.3f}); "
                        f"allowed drop {max_kv_drop:g}", change)
