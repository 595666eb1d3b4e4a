"""A cutover whose clients never stream: an identical new version is promoted within the
analysis timeout, at the default gate settings.

Real processes on sockets: two simulated vLLMs with engine-like pacing (old and an
identical new one), the proxy owning the cutover in adopt mode (the new backend already
runs; no container driver), the `vllm-cutover cutover` CLI as a user runs it, and steady
clients that only send unstreamed chat and completions requests. Such traffic gives no
TTFT or TPOT at all: the gate must judge the unstreamed E2E and E2E per output token it
has, not wait for streamed samples that never come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.e2e.cutover_harness import (
    REPO_ROOT,
    CutoverProxy,
    LoadThread,
    assert_promoted_on_pass,
    cutover_cli,
    wait_count,
)
from tests.e2e.servers import HOST, free_port, spawn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODEL = "sim-model"
# Engine-like pacing: a first token after 40 ms, then one every 10 ms, jittered.
PACE = ("--model-name", MODEL, "--ttft-ms", "40", "--itl-ms", "10", "--jitter", "0.1")
ANALYSIS_TIMEOUT_S = 300


@contextmanager
def _sims(work_dir: Path) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        urls = []
        for name in ("old", "new"):
            port = free_port()
            server = spawn([sys.executable, "-m", "proxy", "--log-level", "WARNING", "sim",
                            "--host", HOST, "--port", str(port), *PACE],
                           port=port, log_path=work_dir / f"sim-{name}.log")
            stack.callback(server.stop)
            server.wait_ready(60)
            urls.append(server.url)
        yield urls[0], urls[1]


def test_unstreamed_traffic_alone_promotes_an_identical_new_version(tmp_path: Path) -> None:
    with _sims(tmp_path) as (old_url, new_url):
        proxy = CutoverProxy(tmp_path / "proxy", old_url, gate_args=(), driver=None)
        proxy.start()
        try:
            with LoadThread(proxy.url, MODEL, clients=8, stream=False) as load:
                wait_count(load, 20, 60)
                started = cutover_cli(proxy, "start", "--new-url", new_url,
                                      "--analysis-timeout", str(ANALYSIS_TIMEOUT_S),
                                      "--analysis-delay", "2", "--post-promotion", "2",
                                      "--scale-down-delay", "0")
                assert started.returncode == 0, started.stderr
                done = proxy.wait_phase(["done"], ANALYSIS_TIMEOUT_S + 60)
                result = load.stop()
        finally:
            proxy.stop()
    failures = result.failures
    assert not failures, f"{len(failures)} of {len(result.outcomes)} failed: {failures[:3]}"
    assert result.outcomes and not any(o.stream for o in result.outcomes)
    phases = [step["to"] for step in done["history"]]
    assert "promoting" in phases and "aborted" not in phases, phases
    assert_promoted_on_pass(done)
    # The cutover's evidence: unstreamed latency on both versions, no streamed one.
    db = tmp_path / "proxy" / "records.sqlite"
    report = subprocess.run(
        [sys.executable, "-m", "proxy", "report", "--db", str(db),
         "--state-file", f"{db}.state.json", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert report.returncode == 0, report.stderr
    latency = json.loads(report.stdout)["latency"]
    assert latency["ttft"]["old"]["n"] == latency["ttft"]["new"]["n"] == 0, latency
    for metric in ("e2e_unstreamed", "tpot_unstreamed"):
        assert min(latency[metric]["old"]["n"], latency[metric]["new"]["n"]) >= 30, latency
