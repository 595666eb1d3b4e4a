"""`verify`, `eval record` and `gate` (one sidecar, or the fleet through Prometheus) run
as real processes against a real HTTP server whose answers never end: each stops at its
limit (size, or total time for a body that trickles) with a one-line error and exit 3,
in bounded memory; an answer of deeply nested JSON is a clear error, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.canned_http import canned_http, endless_http

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
ENGINE = {"/health": b"{}", "/v1/models": MODELS, "/version": b'{"version": "0.32.0"}'}
KILL_RSS_BYTES = 1536 * 1024 * 1024  # before this change the commands grew by GBs
MAX_RSS_BYTES = 600 * 1024 * 1024  # 64 MiB kept at most, the interpreter and its imports


@dataclass(frozen=True)
class Run:
    code: int
    stderr: str
    peak_rss_bytes: int
    wall_s: float


def _vm_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _run(*argv: str, limit_s: float = 60.0) -> Run:
    """`python -m proxy ARGV`; killed (and failed) past KILL_RSS_BYTES or `limit_s`."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "proxy", *argv], cwd=REPO_ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while child.poll() is None:
        peak = max(peak, _vm_rss(child.pid))
        if peak > KILL_RSS_BYTES or time.monotonic() - started > limit_s:
            child.kill()
            child.wait()
            pytest.fail(f"{argv[0]} still reading after {time.monotonic() - started:.0f} s "
                        f"at {peak / 2**20:.0f} MiB RSS")
        time.sleep(0.02)
    assert child.stderr is not None
    return Run(child.returncode, child.stderr.read(), peak, time.monotonic() - started)


def _one_line_no_verdict(run: Run, words: str) -> None:
    assert run.code == 4, run  # no usable answer
    assert "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert words in run.stderr, run.stderr
    assert run.peak_rss_bytes < MAX_RSS_BYTES, run


def test_verify_against_an_endless_engine_stops_at_the_size_limit() -> None:
    with endless_http() as url:
        run = _run("verify", "--url", url)
    _one_line_no_verdict(run, "larger than 67108864 bytes")


def test_verify_against_a_trickling_engine_stops_at_the_time_limit() -> None:
    """A byte every 0.2 s: each read is quicker than the 10 s timeout, the whole is not."""
    with endless_http(byte_every_s=0.2) as url:
        run = _run("verify", "--url", url)
    _one_line_no_verdict(run, "took longer than its time limit")
    assert 9 < run.wall_s < 30, run


def test_verify_prometheus_against_an_endless_prometheus() -> None:
    with endless_http(ENGINE) as engine, endless_http() as prometheus:
        run = _run("verify", "--url", engine, "--prometheus", prometheus)
    _one_line_no_verdict(run, "larger than")


def test_eval_record_against_an_engine_whose_answer_never_ends(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n{"prompt": "world"}\n')
    with endless_http(ENGINE) as url:
        run = _run("eval", "record", "--url", url, "--prompts", str(prompts),
                   "-o", str(tmp_path / "golden.jsonl"))
    _one_line_no_verdict(run, "/v1/completions: the answer is larger than")
    assert not (tmp_path / "golden.jsonl").exists()


@pytest.mark.parametrize("flag", ["--url", "--prometheus"])
def test_gate_against_an_endless_or_trickling_answer(flag: str) -> None:
    with endless_http() as url:
        run = _run("gate", flag, url)
    _one_line_no_verdict(run, "larger than")
    with endless_http(byte_every_s=0.2) as url:
        run = _run("gate", flag, url, "--timeout", "2")
    _one_line_no_verdict(run, "took longer than its time limit")
    assert run.wall_s < 15, run


def test_deeply_nested_json_answers_are_clear_errors(tmp_path: Path) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    with canned_http() as answer:
        url = answer(deep)
        runs = {"verify": _run("verify", "--url", url, "--prometheus", url),
                "eval record": _run("eval", "record", "--url", url, "--prompts", str(prompts),
                                    "-o", str(tmp_path / "golden.jsonl")),
                "gate --url": _run("gate", "--url", url),
                "gate --prometheus": _run("gate", "--prometheus", url)}
    for name, run in runs.items():
        assert "Traceback" not in run.stderr and "RecursionError" not in run.stderr, (name, run)
        assert run.code in (1, 4), (name, run)  # a failed check, or no usable answer
    assert "nested deeper than" in runs["eval record"].stderr, runs["eval record"]
    assert "nested deeper than" in runs["gate --url"].stderr, runs["gate --url"]
    assert "nested deeper than" in runs["gate --prometheus"].stderr, runs["gate --prometheus"]
