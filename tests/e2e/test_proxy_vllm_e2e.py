"""The mirroring proxy in front of real vLLM CPU servers (tiny model), end to end.

Three servers for the whole session: old A and old B serve the same weights (B is the
identical twin, or the noise baseline), "different" serves perturbed weights under the
same name. The proxy runs as `python -m proxy proxy`, and is judged from outside only:
client answers, /admin/stats, /admin/records, /admin/gate, /metrics and
`python -m proxy report --json`.

Requests are sent one at a time, so no server ever batches two of them: batch
composition is a source of token noise this suite does not mean to measure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.proxy_fixtures import (
    RunningProxy,
    fold_stream,
    http_request,
    read_then_hang_up,
    relayed_content,
    sse_events,
    stable_headers,
    start_proxy,
    total,
    vllm_counter,
    wait_for,
    without_volatile,
)
from tests.e2e.vllm_servers import Trio

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MODEL = "tiny"
MAX_TOKENS = 16
PROMPTS = (
    "The quick brown fox",
    "Hello world, this is",
    "Paris is the capital of",
    "A cutover moves traffic from the old server",
    "One two three four five",
)
SETTLE_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Traffic:
    """What one batch sent through a proxy, and what the proxy recorded about it."""

    proxy: RunningProxy
    sent: int
    deterministic: int
    stats: dict[str, Any]
    elapsed_s: float


def request_body(endpoint: str, prompt: str, stream: bool, **sampling: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": MAX_TOKENS, "stream": stream,
                            **sampling}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def path_of(endpoint: str) -> str:
    return "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"


def deterministic_batch() -> list[tuple[str, dict[str, Any]]]:
    """20 requests: both endpoints, streamed and not, greedy and seeded."""
    batch = []
    for i, prompt in enumerate(PROMPTS):
        for endpoint in ("completions", "chat"):
            stream = (i + len(endpoint)) % 2 == 0
            batch.append((endpoint, request_body(endpoint, prompt, stream, temperature=0)))
            seeded = request_body(endpoint, prompt, not stream, temperature=0.8, seed=100 + i)
            batch.append((endpoint, seeded))
    return batch


def sampled_batch() -> list[tuple[str, dict[str, Any]]]:
    """Sampled requests (no seed): compared only as distributions, never counted as compared."""
    return [("completions", request_body("completions", PROMPTS[0], False, temperature=1.0)),
            ("chat", request_body("chat", PROMPTS[1], True, temperature=1.0))]


def send_batch(proxy: RunningProxy, sides: tuple[str, ...]) -> Traffic:
    started = time.perf_counter()
    det, sampled = deterministic_batch(), sampled_batch()
    for endpoint, body in det + sampled:
        answer = http_request("POST", proxy.url + path_of(endpoint), body)
        assert answer.status == 200, (endpoint, body, answer)
    sent = len(det) + len(sampled)
    stats = wait_for(lambda: proxy.settled(sent, sides), SETTLE_TIMEOUT_S,
                     f"{sent} exchanges compared against {sides}")
    return Traffic(proxy, sent, len(det), stats, time.perf_counter() - started)


@pytest.fixture(scope="module")
def identical_traffic(trio: Trio, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """Primary old A, shadow old B (same weights)."""
    with start_proxy(tmp_path_factory.mktemp("proxy-identical"), trio.old_a.url,
                     trio.old_b.url, extra_args=["--gate-min-samples", "20"]) as proxy:
        yield send_batch(proxy, ("shadow",))


@pytest.fixture(scope="module")
def different_traffic(trio: Trio, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """Primary old A, shadow "different" (perturbed weights), baseline old B."""
    with start_proxy(tmp_path_factory.mktemp("proxy-different"), trio.old_a.url,
                     trio.different.url, baseline=trio.old_b.url,
                     extra_args=["--gate-min-samples", "20"]) as proxy:
        yield send_batch(proxy, ("shadow", "baseline"))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_answers_through_the_proxy_equal_direct_ones(
    trio: Trio, tmp_path: Path, endpoint: str, stream: bool
) -> None:
    cases = [
        request_body(endpoint, PROMPTS[2], stream, temperature=0),
        request_body(endpoint, PROMPTS[4], stream, temperature=0.9, seed=7,
                     return_token_ids=True),
    ]
    if stream:
        cases[0]["stream_options"] = {"include_usage": True}
    with start_proxy(tmp_path, trio.old_a.url, trio.old_b.url) as proxy:
        for body in cases:
            direct = http_request("POST", trio.old_a.url + path_of(endpoint), body)
            proxied = http_request("POST", proxy.url + path_of(endpoint), body)
            assert direct.status == proxied.status == 200, (direct, proxied)
            assert stable_headers(proxied) == stable_headers(direct)
            if stream:
                assert direct.headers["content-type"].startswith("text/event-stream")
                direct_events, proxied_events = sse_events(direct.body), sse_events(proxied.body)
                assert direct_events[-1] == proxied_events[-1] == "[DONE]"
                assert len(direct_events) > 3  # really streamed
                assert fold_stream(proxied_events) == fold_stream(direct_events)
                folded = fold_stream(direct_events)
                choices = list(folded["choices"].values())
                assert (folded["usage"] is not None) == ("stream_options" in body)
            else:
                assert without_volatile(proxied.json()) == without_volatile(direct.json())
                choices = direct.json()["choices"]
            assert choices[0]["finish_reason"] in ("length", "stop")
            if body.get("return_token_ids"):
                assert len(choices[0]["token_ids"]) > 0


def test_errors_and_other_paths_relay_unchanged(trio: Trio, tmp_path: Path) -> None:
    unknown_model = request_body("completions", PROMPTS[0], False, model="nope", temperature=0)
    with start_proxy(tmp_path, trio.old_a.url, trio.old_b.url) as proxy:
        for method, path, body in (("POST", "/v1/completions", unknown_model),
                                   ("GET", "/v1/models", None), ("GET", "/version", None),
                                   ("GET", "/no/such/path", None)):
            direct = http_request(method, trio.old_a.url + path, body)
            proxied = http_request(method, proxy.url + path, body)
            assert proxied.status == direct.status, (path, direct, proxied)
            assert stable_headers(proxied) == stable_headers(direct)
            assert relayed_content(proxied) == relayed_content(direct)
        assert direct.status == 404
        # The 404 of the unknown model was mirrored: the shadow got the same 404.
        stats = wait_for(lambda: (s := proxy.stats())["records"] == 1 and s or None, 30,
                         "the mirrored 404 on record")
        assert stats["roles"]["shadow"]["errors"] == stats["roles"]["primary"]["errors"] == 1


def test_identical_servers_give_zero_divergence(identical_traffic: Traffic) -> None:
    traffic, proxy = identical_traffic, identical_traffic.proxy
    shadow = traffic.stats["shadow"]
    assert shadow["compared"] == traffic.deterministic
    assert shadow["diverged"] == 0
    # Sampled requests are compared as distributions only (counted as not_comparable).
    assert shadow["sampled"] + shadow["not_comparable"] == traffic.sent - traffic.deterministic
    assert shadow["errors"] == 0

    report = proxy.report_json()
    assert report["compared"] == traffic.deterministic
    assert report["diverged"] == 0
    assert report["baseline"] is None

    gate = proxy.admin("/admin/gate")
    verdict = gate.json()
    assert {"verdict", "reasons", "samples"} <= set(verdict)
    assert verdict["samples"] == traffic.deterministic
    assert verdict["verdict"] != "fail", verdict["reasons"]
    assert gate.status == (200 if verdict["verdict"] == "pass" else 409)
    assert not any(r.startswith("fail") for r in verdict["reasons"]), verdict["reasons"]


def test_stats_and_report_count_sampled_requests_alike(identical_traffic: Traffic) -> None:
    sampled = identical_traffic.sent - identical_traffic.deterministic
    report = identical_traffic.proxy.report_json()
    assert report["shadow"]["sampled"] == sampled
    assert identical_traffic.stats["shadow"]["sampled"] == sampled


def test_old_and_new_latency_samples_are_alike(identical_traffic: Traffic) -> None:
    """Same traffic, twin servers: both sides must have the same kind and number of samples."""
    latency = identical_traffic.proxy.admin("/admin/gate").json()["details"]["latency"]
    old, new = latency["old"]["tpot"], latency["new"]["tpot"]
    assert old["n"] == new["n"] > 0
    assert old["p50_s"] > 0 and new["p50_s"] > 0


def test_a_server_that_computes_differently_is_caught(different_traffic: Traffic) -> None:
    traffic, proxy = different_traffic, different_traffic.proxy
    shadow, baseline = traffic.stats["shadow"], traffic.stats["baseline"]
    assert shadow["compared"] == traffic.deterministic
    assert shadow["diverged"] > 0
    # The old-vs-old noise measured on the same requests: none.
    assert baseline["compared"] == traffic.deterministic
    assert baseline["diverged"] == 0

    report = proxy.report_json()
    assert report["compared"] == traffic.deterministic
    assert report["diverged"] == shadow["diverged"]
    assert report["baseline"]["compared"] == traffic.deterministic
    assert report["baseline"]["diverged"] == 0

    records = proxy.admin("/admin/records?limit=100", auth=True)
    assert records.status == 200
    diverged = [c for r in records.json()["records"] for c in r["comparisons"]
                if c["against"] == "shadow" and c["outcome"] == "diverged"]
    assert len(diverged) == shadow["diverged"]
    for comparison in diverged:
        assert 0 <= comparison["first_divergence"] <= MAX_TOKENS
        assert comparison["exact_match"] is False
        assert comparison["edit_distance"] > 0

    gate = proxy.admin("/admin/gate")
    assert gate.status == 409
    verdict = gate.json()
    assert verdict["verdict"] != "pass"
    assert verdict["diverged"] == shadow["diverged"]


def test_gate_fails_a_diverging_shadow_without_baseline(trio: Trio, tmp_path: Path) -> None:
    """No baseline: the absolute match-rate threshold applies, and 10 samples suffice to fail."""
    batch = deterministic_batch()[:10]
    with start_proxy(tmp_path, trio.old_a.url, trio.different.url,
                     extra_args=["--gate-min-samples", "10"]) as proxy:
        for endpoint, body in batch:
            assert http_request("POST", proxy.url + path_of(endpoint), body).status == 200
        wait_for(lambda: proxy.settled(len(batch), ("shadow",)), SETTLE_TIMEOUT_S,
                 "the batch compared")
        gate = proxy.admin("/admin/gate")
        verdict = gate.json()
        assert gate.status == 409
        assert verdict["verdict"] == "fail", verdict["reasons"]
        assert verdict["samples"] == len(batch)
        assert verdict["reasons"][0].startswith("fail: new-vs-old match rate"), verdict["reasons"]
        samples = proxy.metrics()
        assert total(samples, "vllm_cutover_verdict", verdict="fail") == 1
        assert total(samples, "vllm_cutover_verdict", verdict="pass") == 0


@dataclass(frozen=True)
class HangUp:
    captures: dict[str, dict[str, Any]]  # role -> the record's capture
    cancelled_metric: float
    made: list[float]  # tokens each server generated (primary, shadow)
    closed_after_s: float  # from just before the request to the client's socket closed


CLOSED_MARGIN_S = 0.5  # events come every few ms: the proxy sees a closed client at once


def hang_up_after_the_first_event(trio: Trio, work_dir: Path, long_tokens: int) -> HangUp:
    """One streamed request through a fresh proxy; the client leaves after its first event."""
    body = request_body("completions", PROMPTS[1], True, temperature=0, ignore_eos=True)
    body["max_tokens"] = long_tokens
    servers = (trio.old_a, trio.old_b)
    generated = "vllm:generation_tokens_total"
    before = [vllm_counter(s.url, generated) for s in servers]
    with start_proxy(work_dir, trio.old_a.url, trio.old_b.url) as proxy:
        sent = time.monotonic()
        lines = read_then_hang_up(proxy.url + "/v1/completions", body, lines=2)
        closed_after_s = time.monotonic() - sent
        assert lines[0].startswith(b"data: {")
        wait_for(lambda: proxy.settled(1, ("shadow",)), SETTLE_TIMEOUT_S, "the record")
        wait_for(lambda: all(vllm_counter(s.url, "vllm:num_requests_running") == 0
                             for s in servers) or None, 60, "both servers idle")
        record = proxy.admin("/admin/records", auth=True).json()["records"][0]
        cancelled = total(proxy.metrics(), "vllm_cutover_client_cancelled_total")
    made = [vllm_counter(s.url, generated) - b for s, b in zip(servers, before)]
    return HangUp({c["role"]: c for c in record["captures"]}, cancelled, made, closed_after_s)


def test_client_disconnect_aborts_generation_on_both_servers(trio: Trio, tmp_path: Path) -> None:
    """The client hangs up after its first SSE event: primary and shadow stop generating.

    The proof needs both still generating when the client leaves. The two CPU servers
    share this machine's cores, and now and then the primary's first token comes seconds
    late, after the shadow has generated all its tokens, or the client (a process on the
    same two cores) closes its socket only as the primary's last tokens arrive: that
    side's record is then rightly complete, not cancelled, and the attempt proves nothing
    about it, so it is made again (up to three times). A primary that streamed on for
    CLOSED_MARGIN_S after the client had closed must have been cancelled.
    """
    # Without an abort: exactly this many (ignore_eos), about 2 s on this CPU. "Stopped"
    # means fewer: a tighter bound would measure this shared VM, whose client or whole
    # machine sometimes stalls for half a second, not the proxy.
    long_tokens = 450
    for attempt in range(3):
        got = hang_up_after_the_first_event(trio, tmp_path / f"attempt-{attempt}", long_tokens)
        primary, shadow = got.captures["primary"], got.captures["shadow"]
        # The proxy's clock for the primary starts after `sent`: at least this long the
        # primary still streamed after the socket was closed, if it was not cancelled.
        streamed_on_s = primary["e2e_s"] - got.closed_after_s
        if not primary["cancelled"] and streamed_on_s < CLOSED_MARGIN_S:
            continue
        assert primary["cancelled"] is True, (streamed_on_s, primary)
        assert primary["ttft_s"] is not None  # the event the client read is in the record
        assert got.cancelled_metric == 1
        assert 0 < got.made[0] < long_tokens, got.made  # the primary stopped early
        shadow_done_first = (not shadow["cancelled"] and shadow["output_tokens"] == long_tokens
                             and shadow["e2e_s"] < primary["e2e_s"])
        if shadow_done_first:
            continue
        assert shadow["cancelled"] is True, (primary, shadow)
        assert got.made[1] < long_tokens, got.made  # the shadow stopped too
        return
    pytest.fail("three times the shadow finished before the primary's first token, or the "
                "client closed only as the primary ended")


def test_metrics_count_the_comparisons(identical_traffic: Traffic,
                                       different_traffic: Traffic) -> None:
    same = identical_traffic.proxy.metrics()
    det, sent = identical_traffic.deterministic, identical_traffic.sent
    comparisons = "vllm_cutover_comparisons_total"
    assert total(same, comparisons, against="shadow", deterministic="true") == det
    assert total(same, comparisons, against="shadow", outcome="match",
                 deterministic="true") == det
    assert total(same, comparisons, outcome="diverged", deterministic="true") == 0
    assert total(same, comparisons, deterministic="false") == sent - det
    assert total(same, "vllm_cutover_requests_total", role="primary") == sent
    assert total(same, "vllm_cutover_shadow_mirrored_total", role="shadow") == sent
    assert total(same, "vllm_cutover_ttft_seconds_count", role="shadow") == sent
    assert total(same, "vllm_cutover_shadow_inflight") == 0

    diff = different_traffic.proxy.metrics()
    diverged = different_traffic.stats["shadow"]["diverged"]
    assert total(diff, comparisons, against="shadow", outcome="diverged",
                 deterministic="true") == diverged
    assert total(diff, comparisons, against="baseline", outcome="match",
                 deterministic="true") == different_traffic.deterministic
    assert total(diff, "vllm_cutover_first_divergence_tokens_count",
                 against="shadow") == diverged
    assert total(diff, "vllm_cutover_first_divergence_tokens_count", against="baseline") == 0
    assert total(diff, "vllm_cutover_verdict", verdict="pass") == 0
