"""The proxy as a real process: its routes survive SIGKILL, SIGTERM finishes streams in flight.

Backends are `vllm-cutover sim` processes (each says who it is at /version); the proxy
is `python -m proxy proxy`, with its state file beside its records.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.demo.processes import Child, sim_ready, spawn_sim
from tests.e2e.proxy_fixtures import ADMIN_TOKEN, REPO_ROOT, http_request, wait_for
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

pytestmark = pytest.mark.e2e
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Child]]:
    logs = tmp_path_factory.mktemp("sims")
    started = {name: spawn_sim(["--version", name, "--itl-ms", "25",
                                "--natural-tokens", "400:400"], logs / f"{name}.log")
               for name in ("old", "new")}
    children = {name: sim_ready(name, proc, logs / f"{name}.log")
                for name, proc in started.items()}
    yield children
    for child in children.values():
        child.stop()


def _proxy_argv(work: Path, primary: str, *extra: str) -> tuple[list[str], int, int]:
    port, admin_port = free_port(), free_port()
    argv = [sys.executable, "-m", "proxy", "proxy", "--host", HOST, "--port", str(port),
            "--primary", primary, "--db", str(work / "records.sqlite"),
            "--admin-port", str(admin_port), "--admin-token", ADMIN_TOKEN, *extra]
    return argv, port, admin_port


def _start(work: Path, primary: str, *extra: str, log: str = "proxy.log",
           ) -> tuple[ServerProcess, str]:
    argv, port, admin_port = _proxy_argv(work, primary, *extra)
    proc = spawn(argv, port=port, log_path=work / log, env={"PYTHONPATH": str(REPO_ROOT)})
    admin_url = f"http://{HOST}:{admin_port}"
    ServerProcess(proc.proc, admin_url, proc.log_path).wait_ready(60, "/admin/routes")
    return proc, admin_url


def _serving(proxy_url: str) -> str:
    answer = http_request("GET", proxy_url + "/version")
    assert answer.status == 200, answer
    return str(answer.json()["version"])


def _routes(admin_url: str) -> dict[str, object]:
    return dict(http_request("GET", admin_url + "/admin/routes").json())


def test_routes_survive_sigkill_and_win_over_the_command_line(sims, tmp_path):
    old, new = sims["old"].url, sims["new"].url
    first, admin_url = _start(tmp_path, old)  # a primary alone: no --shadow
    try:
        assert _serving(first.url) == "old"
        put = http_request("PUT", admin_url + "/admin/routes", headers=AUTH,
                           body={"primary": new, "shadow": old, "expect_version": 1})
        assert put.status == 200, put
        assert _serving(first.url) == "new"
    finally:
        os.kill(first.pid, signal.SIGKILL)  # no clean shutdown: what is on disk is all
        first.stop(grace_s=5)
    state = json.loads((tmp_path / "records.sqlite.state.json").read_text())
    assert state["routes"]["primary"] == new

    again, admin_url = _start(tmp_path, old, log="again.log")  # the original --primary
    try:
        assert _serving(again.url) == "new"
        assert _routes(admin_url) == {"version": 2, "primary": new, "shadow": old,
                                      "baseline": None}
        log = wait_for(lambda: again.log_path.read_text() or None, 10, "the proxy's log")
        assert "routes restored from the state file" in log and f"primary={old}" in log
    finally:
        again.stop(grace_s=10)

    reset, admin_url = _start(tmp_path, old, "--reset-routes", log="reset.log")
    try:
        assert _serving(reset.url) == "old"
        assert _routes(admin_url) == {"version": 3, "primary": old, "shadow": None,
                                      "baseline": None}
    finally:
        reset.stop(grace_s=10)


def test_an_unreadable_state_file_is_a_clear_exit_3(sims, tmp_path):
    state = tmp_path / "records.sqlite.state.json"
    state.write_text('{"routes": {"version": 2, "primary": "http://x:1"')  # cut short
    argv, _, _ = _proxy_argv(tmp_path, sims["old"].url)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=False)
    assert done.returncode == 3, done.stderr
    assert f"state file {str(state)!r} cannot be read" in done.stderr
    assert "Traceback" not in done.stderr


def _refused(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return False
    except OSError:
        return True


def test_sigterm_stops_accepting_and_finishes_the_stream_in_flight(sims, tmp_path):
    proxy, _ = _start(tmp_path, sims["old"].url, "--shadow", sims["new"].url)
    port = int(proxy.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                     body=json.dumps({"prompt": "hello", "max_tokens": 200, "stream": True,
                                      "temperature": 0}))
        resp = conn.getresponse()
        assert resp.status == 200
        first = resp.readline()
        assert first.startswith(b"data: {")
        proxy.proc.send_signal(signal.SIGTERM)
        t_term = time.monotonic()
        wait_for(lambda: _refused(port) or None, 10, "the listener to close")
        assert proxy.proc.poll() is None  # still draining the stream
        rest = resp.read()  # 200 tokens at 25 ms: about 5 s after the first
        t_end = time.monotonic()
    finally:
        conn.close()
    events = [line for line in (first + rest).split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    tokens = sum(len(json.loads(e[6:])["choices"]) for e in events[:-1])
    assert tokens == 200
    assert proxy.proc.wait(timeout=30) == 0
    assert t_end - t_term > 1.0  # the stream really outlived the signal
