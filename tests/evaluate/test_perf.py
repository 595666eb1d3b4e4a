"""`eval perf`'s arithmetic: vllm bench serve's saved JSON read back, ratios, verdict."""

from __future__ import annotations

import pytest

from proxy.evaluate.observe import missing_series
from proxy.evaluate.perf import compare_runs, run_from_bench_json, verdict


def bench_json(ttft_s: float, itl_s: float, n: int = 4, tokens: int = 5) -> dict[str, object]:
    """The keys `vllm bench serve --save-result` writes (times in seconds)."""
    return {"duration": 2.0, "completed": n, "ttfts": [ttft_s] * n,
            "itls": [[itl_s] * (tokens - 1)] * n,
            "latencies": [ttft_s + itl_s * (tokens - 1)] * n, "output_lens": [tokens] * n,
            "errors": [""] * n}


def test_bench_result_becomes_our_summaries() -> None:
    run = run_from_bench_json(bench_json(0.1, 0.02))
    figures = run.as_json()
    assert figures["completed"] == 4 and figures["failed"] == 0
    assert figures["ttft"]["p50_s"] == pytest.approx(0.1)
    assert figures["itl"]["n"] == 16 and figures["tpot"]["p50_s"] == pytest.approx(0.02)
    assert figures["output_throughput"] == pytest.approx(20 / 2.0)


def test_failed_bench_requests_are_counted_not_timed() -> None:
    doc = bench_json(0.1, 0.02)
    doc["completed"] = 3
    doc["errors"] = ["", "", "", "timeout"]
    run = run_from_bench_json(doc)
    assert (run.completed, run.failed, run.samples.summaries()["ttft"].n) == (3, 1, 3)


def test_ratios_and_verdict() -> None:
    old = run_from_bench_json(bench_json(0.1, 0.02))
    new = run_from_bench_json(bench_json(0.2, 0.02))
    ratios = compare_runs(old, new)
    assert ratios["ttft_p50"] == pytest.approx(2.0) and ratios["tpot_p50"] == pytest.approx(1.0)
    status, reason = verdict([ratios], 1.25)
    assert status == "fail" and "ttft_p50 x2.00" in reason
    assert verdict([compare_runs(old, old)], 1.25)[0] == "pass"
    assert verdict([ratios], 0)[0] == "pass"  # not judged
    assert verdict([], 1.25) == ("pass", "one engine: measured, nothing compared")


def test_a_faster_new_engine_that_fails_requests_fails() -> None:
    old = run_from_bench_json(bench_json(0.1, 0.02))
    doc = bench_json(0.05, 0.01)
    doc["completed"] = len(doc["errors"]) - 1
    doc["errors"] = [""] * (len(doc["errors"]) - 1) + ["timeout"]
    new = run_from_bench_json(doc)
    ratios = compare_runs(old, new)
    assert ratios["new_error_rate"] and ratios["new_error_rate"] > 0.01
    status, reason = verdict([ratios], 1.25)
    assert status == "fail" and "new failed" in reason


def test_missing_series_match_by_family() -> None:
    names = {"vllm:time_to_first_token_seconds_bucket", "vllm:generation_tokens_total",
             "vllm:num_requests_running"}
    missing = missing_series(names)
    assert "vllm:time_to_first_token_seconds" not in missing
    assert "vllm:generation_tokens" not in missing and "vllm:kv_cache_usage_perc" in missing
