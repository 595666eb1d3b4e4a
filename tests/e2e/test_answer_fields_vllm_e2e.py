"""Tool calls and the Responses API compared as the client sees them, on real vLLM 0.32.

Three servers of the tiny model with a tool parser (`--enable-auto-tool-choice
--tool-call-parser pythonic`: vLLM 0.32 refuses a named `tool_choice` without one): old A,
its identical replica old B, and "different" (perturbed weights under the same name: it
computes differently, as a new engine whose kernels shift logits would). Chat requests
with a named `tool_choice` get their call through vLLM's guided decoding: `content` is empty on both sides, so only the
tool call's arguments can tell the engines apart. The reference counts are taken by this
test from the servers directly (unstreamed, JSON values compared), independently of the
proxy's code.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, wait_for
from tests.e2e.servers import post_json
from tests.e2e.vllm_servers import Trio, VllmServerFactory, VllmSpec

pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                     "days": {"type": "integer"}},
    "required": ["city", "days"]}}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
TOOL_PARSER = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")


@pytest.fixture(scope="module")
def tool_trio(vllm_servers: VllmServerFactory, tiny_model: Path,
              tiny_models: Any) -> Trio:
    """The trio's three servers, each with a tool parser (started together)."""
    old_a, old_b, different = vllm_servers.start_many([
        VllmSpec(tiny_model, "tiny", extra_args=TOOL_PARSER),
        VllmSpec(tiny_model, "tiny", replica=1, extra_args=TOOL_PARSER),
        VllmSpec(tiny_models(perturb=1), "tiny", extra_args=TOOL_PARSER)])
    return Trio(old_a, old_b, different)
CITIES = ("Paris", "Lyon", "Oslo", "Quito", "Lima", "Rome", "Kyiv", "Accra", "Hanoi", "Bern",
          "Doha", "Riga")


def tool_chat(i: int, stream: bool) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {
        "model": "tiny", "temperature": 0, "max_tokens": 48, "stream": stream,
        "messages": [{"role": "user", "content": f"Weather in {CITIES[i % len(CITIES)]} "
                                                 f"for {i % 5 + 1} days?"}],
        "tools": TOOLS, "tool_choice": NAMED}


def responses(i: int, stream: bool) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"model": "tiny", "temperature": 0, "max_output_tokens": 16,
                             "stream": stream, "input": f"Tell me about {CITIES[i % 12]}."}


def traffic(count: int) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i in range(count):
        out.append(tool_chat(i, stream=i % 2 == 0))
        out.append(responses(i, stream=i % 2 == 1))
    return out


def _visible(path: str, answer: dict[str, Any]) -> Any:
    """What a client reads (the test's own reading; call ids left out)."""
    if path == "/v1/responses":
        return [(item["type"], item.get("name"), item.get("arguments"),
                 [part.get("text") for part in item.get("content") or []])
                for item in answer["output"]], answer["status"]
    message = answer["choices"][0]["message"]
    calls = []
    for call in message.get("tool_calls") or []:
        arguments = call["function"]["arguments"]
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
        calls.append((call["function"]["name"], arguments))
    return message.get("content") or "", calls, answer["choices"][0]["finish_reason"]


# Requests in flight at once: a CPU engine batches them, so the test takes a third of
# the time it took one at a time. Greedy answers can depend on the batch (bf16 kernels
# block by batch size): the identical replica's mirrored run, which asserts zero
# differences, sends one request at a time (one of 100 diverged at 4, beside other work).
CONCURRENCY = 4


def differing(old: str, new: str, requests: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """Requests whose answers differ, per endpoint path, asked of both servers directly."""
    def one(request: tuple[str, dict[str, Any]]) -> tuple[str, bool]:
        path, body = request
        plain = {**body, "stream": False}
        a, b = post_json(old + path, plain), post_json(new + path, plain)
        if path == "/v1/chat/completions":
            assert (a["choices"][0]["message"].get("content") or "") == ""  # the call only
            assert a["choices"][0]["message"]["tool_calls"], a
        return path, _visible(path, a) != _visible(path, b)

    out = {"/v1/chat/completions": 0, "/v1/responses": 0}
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for path, differs in pool.map(one, requests):
            out[path] += differs
    return out


def mirrored_report(tmp_path: Path, old: str, new: str,
                    requests: list[tuple[str, dict[str, Any]]],
                    concurrency: int = CONCURRENCY) -> tuple[dict[str, Any], int]:
    with start_proxy(tmp_path, old, new) as proxy:
        def send(request: tuple[str, dict[str, Any]]) -> None:
            path, body = request
            answer = http_request("POST", proxy.url + path, body)
            assert answer.status == 200, answer

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(send, requests))
        wait_for(lambda: _settled(proxy, len(requests)), 120, "every request compared")
        return proxy.report_json(), proxy.admin("/admin/gate").status


def _settled(proxy: RunningProxy, sent: int) -> dict[str, Any] | None:
    return proxy.settled(sent, ["shadow"])


def test_a_differing_engine_is_caught_on_tool_calls_and_responses(
        tool_trio: Trio, tmp_path: Path) -> None:
    trio = tool_trio
    requests = traffic(12)
    expected = differing(trio.old_a.url, trio.different.url, requests)
    assert expected["/v1/chat/completions"] >= 3, expected  # the engines do differ
    report, gate_status = mirrored_report(tmp_path, trio.old_a.url, trio.different.url,
                                          requests)
    assert report["compared"] == len(requests)
    assert report["shadow"]["compared_endpoints"] == {"chat": 12, "responses": 12}
    # Chat: content is "" on both sides, so each difference is the tool call's.
    assert report["diverged_fields"].get("tool_calls", 0) == expected["/v1/chat/completions"]
    assert report["diverged"] == sum(expected.values())
    assert gate_status != 200 and report["verdict"] != "pass"


def test_an_identical_replica_matches_on_every_field(tool_trio: Trio, tmp_path: Path) -> None:
    """100 requests, enough for the match-rate check's anytime-valid lower bound to clear
    0.9 at the default confidence. The whole verdict is not asserted to pass: at the
    defaults the error-rate check needs about 360 error-free pairs and the p99 checks
    thousands of samples, more than three CPU engines serve in a test; identical versions
    promoted at the defaults are shown on the sims (tests/e2e/test_gate_tail_cutover_e2e.py, test_cutover_unstreamed_e2e)."""
    trio = tool_trio
    requests = traffic(50)
    assert differing(trio.old_a.url, trio.old_b.url, requests) == {
        "/v1/chat/completions": 0, "/v1/responses": 0}
    report, _ = mirrored_report(tmp_path, trio.old_a.url, trio.old_b.url, requests,
                                concurrency=1)
    assert report["compared"] == len(requests) and report["diverged"] == 0, report["reasons"]
    assert report["diverged_fields"] == {}
    assert any(r.startswith("pass: new-vs-old match rate") for r in report["reasons"]), \
        report["reasons"]
    assert not any(r.startswith("fail:") for r in report["reasons"]), report["reasons"]
    assert report["verdict"] != "fail", report["reasons"]
