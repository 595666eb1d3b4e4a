"""`vllm-cutover load` as a user runs it: a real process against a real sim server over
sockets; exit codes by the table, the summary line, exactly --requests requests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.servers import ServerProcess, free_port, spawn


def _sim(tmp_path: Path, *knobs: str) -> ServerProcess:
    port = free_port()
    server = spawn([sys.executable, "-m", "proxy", "sim", "--port", str(port), "--itl-ms", "1",
                    *knobs], port=port, log_path=tmp_path / f"sim-{port}.log")
    server.wait_ready(timeout_s=30)
    return server


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[ServerProcess]:
    server = _sim(tmp_path)
    yield server
    server.stop()


def _load(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", "load", *args], text=True,
                          capture_output=True, timeout=timeout_s, check=False)


def test_exactly_the_requests_asked_and_no_failure(sim: ServerProcess) -> None:
    done = _load("--url", sim.url, "--requests", "13", "--clients", "4", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["requests"] == 13 and summary["failed"] == 0
    assert 0 < summary["streamed"] < 13  # three in four streamed: both kinds sent
    assert "load: 4 client(s) sending to" in done.stderr and "sim-model" in done.stderr


def test_failed_answers_are_counted_by_kind_and_exit_1(tmp_path: Path) -> None:
    server = _sim(tmp_path, "--error-rate", "0.5", "--seed", "3")
    try:
        done = _load("--url", server.url, "--requests", "30", "--stream", "never")
    finally:
        server.stop()
    assert done.returncode == 1, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("load: 30 requests in ") and "failed: http_500 x" in line, line


def test_a_signal_ends_it_with_the_summary(sim: ServerProcess) -> None:
    process = subprocess.Popen([sys.executable, "-m", "proxy", "load", "--url", sim.url],
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(3)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert out.startswith("load: ") and out.rstrip().endswith(", 0 failed"), out
    assert "Traceback" not in err


def test_nothing_listening_exits_4_in_one_line() -> None:
    done = _load("--url", f"http://127.0.0.1:{free_port()}", "--wait", "1")
    assert done.returncode == 4
    assert done.stderr.strip().splitlines()[-1].endswith("nothing accepts connections there")


@pytest.mark.parametrize("args", [
    ("--url", "127.0.0.1:8080"),
    ("--url", "http://127.0.0.1:8080", "--clients", "0"),
    ("--url", "http://127.0.0.1:8080", "--requests", "0"),
    ("--url", "http://127.0.0.1:8080", "--duration", "-1"),
])
def test_bad_input_exits_3_before_sending(args: tuple[str, ...]) -> None:
    done = _load(*args, timeout_s=30)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.startswith("vllm-cutover load: ") and "Traceback" not in done.stderr
