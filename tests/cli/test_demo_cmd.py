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
from tests.terminal_run import TerminalRun


def _demo(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", "--out-dir", str(tmp_path), *args],
        check=False, capture_output=True, text=True, timeout=420,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _report_json(tmp_path: Path) -> dict:
    report = subprocess.run(
        [sys.executable, "-m", "proxy", "report", "--db", str(tmp_path / "records.db"),
         "--state-file", str(tmp_path / "records.db.state.json"), "--json"],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert report.returncode == 0, report.stderr
    return dict(json.loads(report.stdout))


def _assert_report_agrees_with_the_gate(out: str) -> None:
    """The report re-judges every record of the cutover, a later look than the one at
    which the gate promoted: PASS, or at most undecided on a p99 bound that still straddles
    its limit (bounds near a limit move to either side as records come); never a failed
    check, never an undecided match rate, error rate or p50."""
    verdict = re.search(r"^VERDICT: (\w+)$", out, re.MULTILINE)
    assert verdict and verdict.group(1) in ("PASS", "INCONCLUSIVE"), out
    checks = re.findall(r"^  - (\w+): (.*)$", out[verdict.end():], re.MULTILINE)
    assert checks and not [c for c in checks if c[0] == "fail"], out
    undecided = [text for state, text in checks if state != "pass"]
    assert all(re.match(r"[\w-]+( \(unstreamed\))? p99 new/old", text) for text in undecided), out
    assert any(state == "pass" and "match rate" in text for state, text in checks), out


# The readers of the README's demo run (`bash scripts/dev.sh demo`, which makes or checks
# the dev venv): end-to-end, as the README command test that shares the run is, and solo
# (its cutover is judged under the load it makes).
@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.solo
def test_demo_runs_the_whole_story(readme_demo: TerminalRun) -> None:
    """The default demo, as the README's first command runs it at a terminal: a healthy new
    version shadowed, judged, promoted with the old one as its shadow, the old one drained;
    every client answer complete."""
    assert readme_demo.exit_code == 0, readme_demo.shown()
    out = readme_demo.screen
    html = re.search(r"HTML report: (\S+)", out)
    assert html, readme_demo.shown()
    out_dir = Path(html.group(1)).parent  # the demo's default: a new temporary directory
    # 1. launcher dry run on the guide's command
    assert "vllm serve nvidia/Llama-3.1-8B-Instruct-FP4" in out and "(exit 0)" in out
    # 3. clients get the old server's answers through the proxy
    assert "direct answers: 12/12" in out
    # 4. the cutover, phase by phase, with the routes each one left
    phases = re.findall(r"^  -> (\w+)", out, re.MULTILINE)
    assert phases == ["warming", "shadowing", "promoting", "post_promotion", "draining_old",
                      "done"], out
    assert re.search(r"routes: primary = old \(\S+\), shadow = new", out)
    assert re.search(r"routes: primary = new \(\S+\), shadow = old", out)  # reverse shadow
    assert re.search(r"samples \d+/60", out)
    clients = re.search(r"clients: (\d+) requests through the cutover \((\d+) streamed\), "
                        r"(\d+) failed", out)
    assert clients and int(clients.group(1)) > 50 and int(clients.group(2)) > 20
    assert clients.group(3) == "0"
    # 5. the report over the cutover's evidence, labelled old and new
    assert "whichever served clients" in out
    _assert_report_agrees_with_the_gate(out)
    assert {p.name for p in (out_dir / "logs").iterdir()} == {
        "proxy.log", "sim-old.log", "sim-new.log", "sim-baseline.log"}
    assert Path(html.group(1)).read_text().count("<svg") >= 7  # over time, CDFs
    doc = _report_json(out_dir)
    text_verdict = re.search(r"^VERDICT: (\w+)$", out, re.MULTILINE)
    assert text_verdict and doc["verdict"] == text_verdict.group(1).lower()  # same records
    assert doc["compared"] >= 60
    assert doc["baseline"]["compared"] > 0
    # the summary's verdict is the report's, a later look than the promotion's: pass, or
    # undecided on a p99 only (checked above, as `_assert_report_agrees_with_the_gate` says)
    summary = re.search(r"Demo finished .*; cutover done, verdict (pass|inconclusive), 0 client",
                        out)
    assert summary and summary.group(1) == text_verdict.group(1).lower(), out


def test_demo_regression_is_aborted_and_clients_never_notice(tmp_path: Path) -> None:
    out = _demo(tmp_path, "--scenario", "regression", "--no-launcher")
    phases = re.findall(r"^  -> (\w+)", out, re.MULTILINE)
    assert phases[:2] == ["warming", "shadowing"] and phases[-2:] == ["aborting", "aborted"]
    assert "promoting" not in phases
    assert "gate failed while shadowing" in out
    assert re.search(r"(\d+) requests through the cutover .*, 0 failed", out)
    assert "the old version kept serving every client all along" in out
    doc = _report_json(tmp_path)
    assert doc["verdict"] == "fail" and doc["diverged"] >= 1
    # Into a pipe the gate's progress is a few plain lines, not one per quarter second.
    assert 1 <= len(re.findall(r"^ +phase shadowing .*samples \d+/60", out, re.MULTILINE)) <= 6


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.solo
def test_in_a_terminal_the_progress_is_one_line_redrawn_in_place(readme_demo: TerminalRun
                                                                  ) -> None:
    """The README's demo at a terminal (the run the story test reads too)."""
    assert readme_demo.exit_code == 0, readme_demo.shown()
    drawings = re.findall(r"\r +phase shadowing [^\r\n]*samples (\d+)/60", readme_demo.raw)
    assert len(drawings) >= 3, readme_demo.raw[-3000:]  # redrawn as the samples come in
    # What the terminal keeps: each row is its last drawing; shadowing's progress is one row.
    kept = [row for row in readme_demo.screen.split("\n") if "phase shadowing" in row]
    assert len(kept) == 1 and f"samples {drawings[-1]}/60" in kept[0], kept


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
    bad, good = sim_knobs(DemoConfig(scenario="regression")), sim_knobs(DemoConfig())
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
    assert done.returncode == 3 and "999" in done.stderr


def test_a_backend_that_cannot_start_is_reported_from_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "sim-broken.log"
    process = spawn_sim(["--error-rate", "7"], log_path)
    # Its log goes to a file, not a pipe the demo would have to drain while it runs.
    assert process.stderr is None
    with pytest.raises(DemoError, match="error_rate") as raised:
        sim_ready("broken", process, log_path, timeout_s=30)
    assert str(log_path) in str(raised.value)
    assert "error_rate" in log_path.read_text()
