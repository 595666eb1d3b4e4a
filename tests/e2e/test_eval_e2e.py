"""`eval record` / `eval compare` on real vLLM CPU engines (the trio plus eval_servers).

The golden is recorded once from old A. Old B (identical) passes; the perturbed engine
fails on tokens with its divergences shown; the engine whose answers are cut short after
their first tokens fails on the paired length test. Bad input exits 2 and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from tests.e2e.conftest import trio_specs
from tests.e2e.eval_servers import CUT_SHORT_TOKENS, cut_short_spec, fp32_spec
from tests.e2e.proxy_fixtures import http_request, start_proxy, wait_for
from tests.e2e.servers import free_port
from tests.e2e.vllm_servers import VllmServer, VllmServerFactory

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "a", "model", "answers", "every", "question", "it", "is", "asked", "about", "the", "weather", "and", "the", "sea", "near", "the", "old", "harbour"]


# The tiny model's random weights leave near-ties between tokens: two identical CPU engines
# differ now and then (batches differ between runs), so identical engines are held to 0.8.
LOOSE = ("--gate-min-match-rate", "0.8")


def write_prompts(path: Path, n: int = 40) -> Path:
    """A small set of our own: completions and chat requests, 12-18 tokens each."""
    lines = []
    for i in range(n):
        text = " ".join(WORDS[(i * 3) % 20:(i * 3) % 20 + 4 + i % 5])
        if i % 4 == 3:
            lines.append({"messages": [{"role": "user", "content": text}], "max_tokens": 12})
        else:
            lines.append({"prompt": text, "max_tokens": 12 + i % 7})
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    return path


@pytest.fixture(scope="module")
def engines(vllm_servers: VllmServerFactory, tiny_model: Path,
            tiny_models: Callable[..., Path]) -> dict[str, VllmServer]:
    old_a, old_b, different, cut, fp32 = vllm_servers.start_many(
        [*trio_specs(tiny_model, tiny_models), cut_short_spec(tiny_model), fp32_spec(tiny_model)])
    return {"old_a": old_a, "old_b": old_b, "different": different, "cut": cut, "fp32": fp32}


@pytest.fixture(scope="module")
def golden(engines: dict[str, VllmServer], tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("eval")
    out = work / "golden.jsonl"
    code = main(["eval", "record", "--url", engines["old_a"].url,
                 "--prompts", str(write_prompts(work / "prompts.jsonl")), "-o", str(out),
                 "--concurrency", "16"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def golden_text(engines: dict[str, VllmServer], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same golden with --store-text: token ids and logprobs, so divergences have
    exact positions and closeness."""
    work = tmp_path_factory.mktemp("eval-text")
    out = work / "golden.jsonl"
    code = main(["eval", "record", "--url", engines["old_a"].url, "--store-text",
                 "--prompts", str(write_prompts(work / "prompts.jsonl")), "-o", str(out),
                 "--concurrency", "16"])
    assert code == 0
    return out


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(args)
    out = capsys.readouterr().out
    return code, json.loads(out)


def compare(golden: Path, url: str, capsys: pytest.CaptureFixture[str],
            *more: str) -> tuple[int, dict[str, Any]]:
    return run_json(["eval", "compare", "--golden", str(golden), "--url", url, "--json",
                     "--concurrency", "16", *more], capsys)  # batched: less CPU per request


def test_golden_holds_greedy_answers_with_logprobs(golden: Path) -> None:
    header, *rows = [json.loads(line) for line in golden.read_text().splitlines()]
    assert header["engine"]["version"] == "0.32.0" and header["engine"]["models"] == ["tiny"]
    assert len(rows) == 40
    for row in rows:
        answer = row["answer"]
        assert row["request"]["temperature"] == 0 and row["request"]["model"] == "tiny"
        assert answer["output_tokens"] <= row["request"]["max_tokens"]
        # No --store-text: the ids as keyed hashes of 16-id blocks, no logprobs, no text.
        assert len(answer["token_id_blocks"]) == -(-answer["output_tokens"] // 16)
        if answer["finish_reason"] == "length":
            assert answer["output_tokens"] == row["request"]["max_tokens"]
        assert answer["token_ids"] is answer["top_logprobs"] is answer["text"] is None


def test_replica_passes(golden: Path, engines: dict[str, VllmServer],
                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    html = tmp_path / "compare.html"
    code, result = compare(golden, engines["old_b"].url, capsys, "--html", str(html),
                           *LOOSE)
    assert (code, result["verdict"]) == (0, "pass"), result["reasons"]
    assert result["compared"] == 40 and result["diverged"] <= 4
    assert result["lengths"]["ratio"] == pytest.approx(1.0, abs=0.05)
    assert "PASS" in html.read_text()


def test_different_engine_fails_with_divergences(golden_text: Path,
                                                 engines: dict[str, VllmServer],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, result = compare(golden_text, engines["different"].url, capsys,
                           "--baseline-url", engines["old_b"].url)
    assert (code, result["verdict"]) == (1, "fail"), result["reasons"]
    assert result["diverged"] >= 30
    # Old vs old is not always exact either (batches differ between runs): the noise.
    assert result["baseline"]["compared"] == 40 and result["baseline"]["match_rate"] >= 0.9
    positions = result["first_divergence"]["positions"]
    assert len(positions) == result["diverged"] and min(positions) >= 0
    assert any("match rate" in r and r.startswith("fail") for r in result["reasons"])
    diverged = [r for r in result["requests"] if r["outcome"] == "diverged"]
    assert all(r["first_divergence"] is not None and r["close"] is not None for r in diverged)


def test_replica_against_baseline_noise(golden: Path, engines: dict[str, VllmServer],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, result = compare(golden, engines["old_b"].url, capsys, "--baseline-url",
                           engines["old_a"].url, "--gate-max-excess-divergence", "0.15")
    assert (code, result["verdict"]) == (0, "pass"), result["reasons"]
    noise = result["baseline"]["match_rate"]
    assert result["gate"]["threshold"] == pytest.approx(noise - 0.15)


@pytest.mark.parametrize("store_text", [True, False])
def test_cut_short_answers_fail_on_lengths(golden: Path, golden_text: Path,
                                           engines: dict[str, VllmServer], store_text: bool,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, result = compare(golden_text if store_text else golden, engines["cut"].url, capsys)
    assert (code, result["verdict"]) == (1, "fail")
    assert any(r.startswith("fail: new/old output tokens") and "shorter" in r
               for r in result["reasons"]), result["reasons"]
    # The first tokens match: the answers diverge where the cap ended them: at that token
    # with the ids kept, else at the start of the 16-id block that holds it (only hashes
    # of blocks are kept without --store-text).
    where = CUT_SHORT_TOKENS if store_text else CUT_SHORT_TOKENS // 16 * 16
    positions = result["first_divergence"]["positions"]
    assert positions.count(where) >= 36 and max(positions) == where, positions
    assert result["lengths"]["shorter"] == 40 and result["lengths"]["wilcoxon_p"] < 1e-6


def test_unreachable_url_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "golden.jsonl"
    url = f"http://127.0.0.1:{free_port()}"
    code = main(["eval", "record", "--url", url, "--prompts",
                 str(write_prompts(tmp_path / "p.jsonl", 3)), "-o", str(out)])
    assert code == 4
    assert f"cannot reach {url}" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "p.jsonl"]


def test_golden_of_another_model_is_refused(golden: Path, engines: dict[str, VllmServer],
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = golden.read_text().splitlines()
    other = tmp_path / "other.jsonl"
    rows = [json.loads(line) for line in lines]
    for row in rows[1:]:
        row["request"]["model"] = "llama-70b"
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "compare", "--golden", str(other), "--url", engines["old_b"].url]) == 3
    err = capsys.readouterr().err
    assert "llama-70b" in err and "--allow-model-mismatch" in err
    code, result = compare(other, engines["old_b"].url, capsys, "--allow-model-mismatch", *LOOSE)
    assert code == 0 and result["warnings"]


def write_texts(path: Path) -> Path:
    """JSONL for a .jsonl path, else a plain text file of the same texts (paragraphs)."""
    texts = [" ".join(WORDS[i % 9:] * (1 + i % 3)) for i in range(10)]
    texts.append(" ".join(WORDS * 30))  # ~900 tokens: several windows of 511
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        path.write_text("\n\n".join(texts) + "\n")
    return path


def test_perplexity_of_two_dtypes_differs_a_little(engines: dict[str, VllmServer],
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    texts = write_texts(tmp_path / "texts.txt")  # a plain text file, one text a paragraph
    code, result = run_json(["eval", "perplexity", "--url", engines["old_a"].url, "--url",
                             engines["fp32"].url, "--texts", str(texts), "--json"], capsys)
    assert code == 0, result
    old, new = (r["perplexity"] for r in result["results"])
    delta = result["delta"]
    assert delta["value"] == pytest.approx(new - old)
    assert delta["value"] != 0  # bfloat16 and float32 do not compute alike
    assert abs(delta["relative"]) < 0.02  # ... but nearly
    low, high = delta["ci"]
    assert low <= delta["value"] <= high and low < high
    assert result["windows"] > result["texts"] == 11  # the long text took several windows
    assert delta["method"] == "paired bootstrap (BCa)"


def test_echo_scores_as_prompt_logprobs_do(engines: dict[str, VllmServer], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    texts = write_texts(tmp_path / "texts.jsonl")
    found = {}
    for method in ("prompt_logprobs", "echo"):
        code, result = run_json(["eval", "perplexity", "--url", engines["old_a"].url,
                                 "--texts", str(texts), "--method", method,
                                 "--max-model-len", "64", "--json"], capsys)
        assert code == 0
        found[method] = result["results"][0]["perplexity"]
    assert found["echo"] == pytest.approx(found["prompt_logprobs"], rel=1e-4)


def test_perf_side_by_side_with_our_client(engines: dict[str, VllmServer], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    prompts = write_prompts(tmp_path / "p.jsonl", 8)
    code, result = run_json(["eval", "perf", "--url", engines["old_a"].url, "--url",
                             engines["old_b"].url, "--prompts", str(prompts),
                             "--concurrency", "1,4", "--max-tokens", "16", "--max-slowdown",
                             "0", "--json"], capsys)
    assert code == 0 and result["tool"] == "vllm-cutover"
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 4]
    for level in result["levels"]:
        for eng in level["engines"]:
            assert eng["completed"] == 8 and eng["failed"] == 0
            assert eng["ttft"]["n"] == 8 and eng["output_throughput"] > 0
        assert level["ratios"]["ttft_p50"] > 0 and level["ratios"]["output_throughput"] > 0


@pytest.mark.slow
def test_perf_reads_vllm_bench_serve(engines: dict[str, VllmServer], vllm_python: str,
                                     tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One engine (each run of vllm bench imports vLLM: ~20 s of CPU)."""
    code, result = run_json(["eval", "perf", "--url", engines["old_a"].url,
                             "--vllm-bench", vllm_python,
                             "--tokenizer", str(tiny_model), "--num-prompts", "6",
                             "--input-len", "16", "--output-len", "8", "--concurrency", "2",
                             "--max-slowdown", "0", "--json"], capsys)
    assert code == 0, result
    assert result["tool"] == "vllm bench serve"
    (level,) = result["levels"]
    for eng in level["engines"]:
        assert eng["completed"] == 6 and eng["ttft"]["n"] == 6
        assert eng["tpot"]["n"] == 6  # --ignore-eos: 8 tokens each


def test_memory_sees_the_smaller_kv_cache_of_float32(engines: dict[str, VllmServer],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The same 1 GiB of KV space holds half the tokens in float32: the check fails."""
    code, result = run_json(["eval", "memory", "--url", engines["old_a"].url, "--url",
                             engines["fp32"].url, "--json"], capsys)
    old, new = (e["kv_cache"] for e in result["engines"])
    assert old["kv_cache_memory_bytes"] == new["kv_cache_memory_bytes"]
    assert new["kv_cache_size_tokens"] == old["kv_cache_size_tokens"] / 2
    assert (code, result["verdict"]) == (1, "fail") and result["kv_tokens_ratio"] == 0.5
    assert result["gpus"].startswith("n/a")
    code, result = run_json(["eval", "memory", "--url", engines["old_a"].url, "--url",
                             engines["old_b"].url, "--json"], capsys)
    assert (code, result["verdict"]) == (0, "pass")


def test_a_float32_shadow_is_caught_on_answers_with_paired_latency(
        engines: dict[str, VllmServer], tmp_path: Path) -> None:
    """Behind the proxy: old A (bfloat16) serves, the float32 engine shadows, old B is the
    baseline. One request at a time, each sent once the one before is compared on both
    sides (a shadow's requests piling up would batch differently, and greedy bfloat16
    answers depend on the batch). Each request's old and new times are read by the capture
    worker, so every latency check is judged on pairs; their ratios are not asserted:
    three CPU engines on two cores slow each other's OpenMP threads, so here the ratio
    says which engine the scheduler favoured, not which computes faster."""
    requests = []
    for i in range(24):
        text = " ".join(WORDS[(i * 5) % 20:(i * 5) % 20 + 5 + i % 4])
        body: dict[str, Any] = {"model": "tiny", "temperature": 0, "max_tokens": 16,
                                "stream": i % 3 != 2}
        if i % 2:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        requests.append(("/v1/chat/completions" if i % 2 else "/v1/completions", body))
    with start_proxy(tmp_path, engines["old_a"].url, engines["fp32"].url,
                     baseline=engines["old_b"].url) as proxy:
        for sent, (path, body) in enumerate(requests, 1):
            answer = http_request("POST", proxy.url + path, body)
            assert answer.status == 200, answer
            wait_for(partial(proxy.settled, sent, ("shadow", "baseline")), 120,
                     f"request {sent} compared on both sides", every_s=0.05)
        report = proxy.report_json()
        verdict = proxy.admin("/admin/gate").json()
    assert report["compared"] == len(requests)
    assert report["diverged"] > 0, report["diverged_fields"]  # float32 computes otherwise
    assert report["baseline"]["diverged"] == 0, report["baseline"]
    assert verdict["verdict"] != "pass", verdict["reasons"]
    ratios = verdict["details"]["latency"]["ratios"]
    streamed = sum(1 for _, body in requests if body["stream"])
    # every streamed request gives a TTFT pair; a TPOT pair needs two tokens on both sides
    assert ratios["max_ttft_p50_ratio"]["basis"] == "capture worker", ratios
    assert ratios["max_ttft_p50_ratio"]["pairs"] == streamed, ratios
    assert ratios["max_ttft_p99_ratio"]["basis"] == "paired", ratios
    assert ratios["max_ttft_p99_ratio"]["pairs"] == streamed, ratios
    assert ratios["max_tpot_p99_ratio"]["basis"] == "paired", ratios
    assert 0 < ratios["max_tpot_p99_ratio"]["pairs"] <= streamed, ratios
