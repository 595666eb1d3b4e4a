"""Every field the client sees is compared, through the real proxy, on simulated vLLMs.

A primary sim and a shadow sim that differs in one field only (`--diverge-field`): the
proxy (its capture worker, SQLite records, `report --json`, `/admin/gate`) catches the
divergence and counts it on that field; identical versions pass. Traffic: chat with tools
(named, auto, required), reasoning, JSON schema, n = 2, completions, and the Responses
API, streamed and not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, total, wait_for
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

pytestmark = [pytest.mark.e2e]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
RESPONSE_TOOLS = [{"type": "function", "name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@contextmanager
def sim(work_dir: Path, *args: str) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "proxy", "--log-level", "WARNING", "sim", "--host", HOST,
            "--port", str(port), "--reasoning", "--itl-ms", "1", *args]
    name = "-".join(a.strip("-").replace(":", "") for a in args) or "plain"
    server: ServerProcess = spawn(argv, port=port, log_path=work_dir / f"sim-{name}.log")
    try:
        server.wait_ready(60)
        yield server.url
    finally:
        server.stop()


def chat(i: int, stream: bool, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {
        "messages": [{"role": "user", "content": f"question {i}"}], "temperature": 0,
        "max_tokens": 24, "stream": stream, **extra}


def completion(i: int, stream: bool, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/completions", {"prompt": f"text {i}", "temperature": 0, "max_tokens": 16,
                               "stream": stream, **extra}


def responses(i: int, stream: bool, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"input": f"ask {i}", "temperature": 0, "max_output_tokens": 24,
                             "stream": stream, **extra}


def tool_requests(count: int) -> list[tuple[str, dict[str, Any]]]:
    """Requests whose every answer is a tool call (named or required)."""
    out = []
    for i in range(count):
        stream = i % 2 == 0
        if i % 3 == 0:
            out.append(responses(i, stream, tools=RESPONSE_TOOLS, tool_choice="required"))
        else:
            out.append(chat(i, stream, tools=TOOLS,
                            tool_choice=NAMED if i % 3 == 1 else "required"))
    return out


def plain_requests(count: int) -> list[tuple[str, dict[str, Any]]]:
    """Completions (no reasoning, no tools), n = 1."""
    return [completion(100 + i, i % 2 == 0) for i in range(count)]


def send(proxy: RunningProxy, requests: list[tuple[str, dict[str, Any]]]) -> None:
    for path, body in requests:
        answer = http_request("POST", proxy.url + path, body)
        assert answer.status == 200, answer


def report_of(proxy: RunningProxy, sent: int) -> dict[str, Any]:
    wait_for(lambda: proxy.settled(sent, ["shadow"]), 60, "every request compared")
    return proxy.report_json()


def test_identical_versions_pass_on_every_field(tmp_path: Path) -> None:
    mixed = (tool_requests(12) + plain_requests(6)
             + [chat(200 + i, i % 2 == 0, tools=TOOLS, tool_choice="auto") for i in range(6)]
             + [chat(300 + i, i % 2 == 0, n=2) for i in range(4)]
             + [completion(400 + i, i % 2 == 0, n=2) for i in range(4)]
             + [responses(500 + i, i % 2 == 0) for i in range(4)]
             + [chat(600 + i, True, response_format={"type": "json_schema", "json_schema": {
                 "name": "s", "schema": {"type": "object", "properties": {
                     "a": {"type": "string"}}}}}) for i in range(2)])
    with sim(tmp_path) as old, sim(tmp_path, "--seed", "0") as new, \
            start_proxy(tmp_path / "proxy", old, new) as proxy:
        # Enough evidence for the match rate's anytime-valid lower bound to clear 0.9
        # without a baseline (about 85 identical answers at the default confidence).
        mixed += [(path, {**body, "seed": seed}) for seed in (1, 2) for path, body in mixed]
        send(proxy, mixed)
        stateful = responses(900, False, previous_response_id="resp_abc")
        send(proxy, [stateful])  # relayed to the primary, never mirrored
        report = report_of(proxy, len(mixed))
        gate = proxy.admin("/admin/gate")
        dropped = total(proxy.metrics(), "vllm_cutover_shadow_dropped_total",
                        reason="responses_previous_response")
    assert dropped == 1
    assert report["compared"] == len(mixed) and report["diverged"] == 0
    assert report["diverged_fields"] == {}
    assert set(report["shadow"]["compared_endpoints"]) == {"chat", "completions", "responses"}
    assert report["admission"]["shed"] == {"responses_previous_response": 1}
    # The answers pass; the verdict may still wait on latency samples (small, noisy here).
    assert any(r.startswith("pass: new-vs-old match rate") for r in report["reasons"])
    assert report["verdict"] != "fail", report["reasons"]
    assert (gate.status == 200) == (report["verdict"] == "pass")


@pytest.mark.parametrize(("field", "traffic", "expected"), [
    ("tool_arguments", "tools+plain", {"tool_calls": 12}),
    ("reasoning", "tools+plain", {"reasoning": 12}),
    ("choice:1", "n2+plain", {"content": 4, "text": 4}),
    ("tool_arguments", "responses", {"tool_calls": 8}),
], ids=["tool-arguments", "reasoning", "choice-1-of-n2", "responses-function-call"])
def test_a_version_differing_in_one_field_is_caught_on_that_field(
        tmp_path: Path, field: str, traffic: str, expected: dict[str, int]) -> None:
    if traffic == "tools+plain":
        requests = tool_requests(12) + plain_requests(8)
    elif traffic == "n2+plain":
        requests = ([chat(i, i % 2 == 0, n=2) for i in range(4)]
                    + [completion(i, i % 2 == 0, n=2) for i in range(4)] + plain_requests(8))
    else:
        requests = [responses(i, i % 2 == 0, tools=RESPONSE_TOOLS, tool_choice="required")
                    for i in range(8)]
    with sim(tmp_path) as old, sim(tmp_path, "--diverge-field", field) as new, \
            start_proxy(tmp_path / "proxy", old, new) as proxy:
        send(proxy, requests)
        report = report_of(proxy, len(requests))
        gate = proxy.admin("/admin/gate")
        metrics = proxy.metrics()
    for name, count in expected.items():
        assert total(metrics, "vllm_cutover_diverged_field_total", against="shadow",
                     field=name) == count
    assert report["compared"] == len(requests)
    assert report["diverged_fields"] == expected
    assert report["diverged"] == sum(expected.values())
    if field.startswith("choice:"):
        assert report["shadow"]["diverged_later_choice"] == report["diverged"]
    if traffic == "responses":
        assert report["shadow"]["compared_endpoints"] == {"responses": len(requests)}
    assert gate.status != 200 and report["verdict"] == "fail", report["reasons"]
