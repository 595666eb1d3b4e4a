"""`vllm-cutover demo` end to end (real processes and sockets), plus its pure parts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from proxy.demo.processes import DemoError, sim_ready, spawn_sim
from proxy.demo.run import DemoConfig, sim_knobs
from proxy.demo.traffic import answer_text, demo_requests


def test_demo_runs_the_whole_story(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", "--out-dir", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    # 1. launcher dry run on the guide's command
    assert "vllm serve nvidia/Llama-3.1-8B-Instruct-FP4" in out and "(exit 0)" in out
    # 3. clients get the old server's answers, every mirrored exchange is recorded
    assert "direct answers: 12/12" in out
    recorded = re.search(r"proxy recorded (\d+) mirrored exchanges \(expected (\d+)\)", out)
    assert recorded and recorded.group(1) == recorded.group(2)
    # 4. the live gate refuses the regression (409), 5. the report explains why
    assert re.search(r"/admin/gate -> HTTP 409", out)
    assert "  verdict: fail" in out  # the live gate and the report agree
    assert "VERDICT: FAIL" in out and "fail: new-vs-old match rate" in out
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {
        "proxy.log", "sim-old.log", "sim-new.log", "sim-baseline.log"}
    html = re.search(r"HTML report: (\S+)", out)
    assert html and Path(html.group(1)).read_text().count("<svg") == 3
    report = subprocess.run(
        [sys.executable, "-m", "proxy", "report", "--db", str(tmp_path / "records.db"), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(report.stdout)
    assert doc["compared"] >= 100 and doc["diverged"] >= 5
    assert doc["baseline"]["compared"] == doc["compared"]
    assert doc["baseline"]["diverged"] < doc["diverged"]
    assert doc["verdict"] == "fail"


def test_traffic_mix_covers_every_path() -> None:
    requests = demo_requests(48, "m")
    kinds = Counter(
        (r.path, bool(r.body.get("stream")), r.deterministic, "logprobs" in r.body)
        for r in requests
    )
    paths = {k[0] for k in kinds}
    assert paths == {"/v1/completions", "/v1/chat/completions"}
    assert {k[1] for k in kinds} == {True, False} and {k[2] for k in kinds} == {True, False}
    assert any(k[3] for k in kinds) and not any(k[3] and not k[2] for k in kinds)
    assert sum(r.deterministic for r in requests) == 32
    assert demo_requests(48, "m") == requests  # reproducible


def test_answer_text_reads_streams_and_bodies() -> None:
    chat = (
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":" a"}}]}\n\n'
        b'data: {"choices":[],"usage":{}}\n\ndata: [DONE]\n\n'
    )
    assert answer_text("/v1/chat/completions", chat, True) == " a"
    body = json.dumps({"choices": [{"text": " b"}]}).encode()
    assert answer_text("/v1/completions", body, False) == " b"


def test_scenarios_differ_only_in_the_new_backend() -> None:
    bad, good = sim_knobs(DemoConfig()), sim_knobs(DemoConfig(scenario="healthy"))
    assert bad["old"] == good["old"] and bad["baseline"] == good["baseline"]
    assert bad["new"] != good["new"]


def test_invalid_demo_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="0"):
        DemoConfig(requests=0)
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", "--concurrency", "999"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "999" in done.stderr


def test_a_backend_that_cannot_start_is_reported_from_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "sim-broken.log"
    process = spawn_sim(["--error-rate", "7"], log_path)
    # Its log goes to a file, not a pipe the demo would have to drain while it runs.
    assert process.stderr is None
    with pytest.raises(DemoError, match="error_rate") as raised:
        sim_ready("broken", process, log_path, timeout_s=30)
    assert str(log_path) in str(raised.value)
    assert "error_rate" in log_path.read_text()
