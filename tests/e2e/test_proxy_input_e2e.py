"""Hostile input against the proxy as a real process in front of three simulated vLLMs.

A lone surrogate reaches every side as valid JSON and no mirror is lost uncounted; a
body without a length or over the limit gets a short JSON refusal and one log line;
slowloris connections are closed by the header timeout while normal requests are
served, and idle connections per client IP are capped.
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import time
from collections.abc import Iterator

import pytest

from proxy.demo.processes import Child, sim_ready, spawn_sim
from tests.e2e.proxy_fixtures import (
    RunningProxy,
    fold_stream,
    http_request,
    sse_events,
    start_proxy,
    wait_for,
)
from tests.e2e.servers import HOST

pytestmark = pytest.mark.e2e
HEADER_TIMEOUT_S = 5.0
MAX_IDLE = 24
MAX_BODY = 4096
ITL_MS = 20


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    logs = tmp_path_factory.mktemp("sims")
    started = {name: spawn_sim(["--version", name, "--itl-ms", str(ITL_MS),
                                "--natural-tokens", "1000:1000"], logs / f"{name}.log")
               for name in ("old", "new", "old2")}
    sims: dict[str, Child] = {n: sim_ready(n, p, logs / f"{n}.log") for n, p in started.items()}
    try:
        with start_proxy(tmp_path_factory.mktemp("proxy"), sims["old"].url, sims["new"].url,
                         sims["old2"].url, extra_args=[
                             "--max-body-bytes", str(MAX_BODY),
                             "--header-timeout", str(HEADER_TIMEOUT_S),
                             "--max-idle-per-client", str(MAX_IDLE)]) as running:
            yield running
    finally:
        for sim in sims.values():
            sim.stop()


def _connect(proxy: RunningProxy) -> socket.socket:
    port = int(proxy.url.rsplit(":", 1)[1])
    return socket.create_connection((HOST, port), timeout=10)


def _exchange(proxy: RunningProxy, raw: bytes) -> bytes:
    """Send `raw`, read until the proxy closes (or 10 s)."""
    with _connect(proxy) as sock:
        try:
            sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        parts = []
        try:
            while chunk := sock.recv(65536):
                parts.append(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(parts)


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_lone_surrogate_reaches_every_side_and_no_mirror_is_lost(proxy):
    body = {"model": "sim-model", "prompt": "x\ud800y", "max_tokens": 4, "stream": True,
            "temperature": 0}
    answer = http_request("POST", proxy.url + "/v1/completions", body=body)
    assert answer.status == 400, answer  # the sim refuses it as vLLM does

    def recorded() -> list[tuple[str, int | None]] | None:
        with sqlite3.connect(proxy.db_path) as db:
            rows = db.execute("SELECT role, status FROM capture").fetchall()
        return rows if len(rows) >= 3 else None

    rows = wait_for(recorded, 30, "the exchange's three captures")
    # Each side got the request as valid JSON, so each refused it the same way (a body of
    # invalid UTF-8 would not reach the tokenizer; an unsent baseline has no status).
    assert sorted(rows) == [("baseline", 400), ("primary", 400), ("shadow", 400)]
    metrics = proxy.metrics()
    lost = {dict(labels)["reason"]: value for (name, labels), value in metrics.items()
            if name == "vllm_cutover_shadow_dropped_total"}
    assert not any(lost.values()), lost


def test_bodies_without_a_length_or_over_the_limit_are_refused_short(proxy):
    log_before = proxy.log_path.stat().st_size
    big = b'{"prompt": "' + b"y" * 200_000 + b'"}'
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for _ in range(12):
        # HTTP/1.1 reads no body here: the body is parsed as the next request (400).
        unframed = _exchange(proxy, head + b"\r\n" + big)
        assert unframed.startswith(b"HTTP/1.0 400 "), unframed[:200]
        assert len(unframed) < 1024 and b"yyyy" not in unframed
    head_only = _exchange(proxy, head + b"\r\n")  # a generation request needs a length
    assert head_only.startswith(b"HTTP/1.1 411 "), head_only[:200]
    chunked = _exchange(proxy, head + b"Transfer-Encoding: chunked\r\n\r\n"
                        + b"%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.1 413 "), chunked[:200]
    assert len(chunked) < 1024 and b"yyyy" not in chunked
    garbage = _exchange(proxy, big + b"\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.0 400 "), garbage[:200]
    assert len(garbage) < 1024 and b"yyyy" not in garbage
    error = json.loads(garbage.split(b"\r\n\r\n", 1)[1])
    assert error["error"]["type"] == "vllm_cutover_proxy_error"
    ok = http_request("POST", proxy.url + "/v1/completions",
                      body={"model": "sim-model", "prompt": "hi", "max_tokens": 2})
    assert ok.status == 200, ok
    log = proxy.log_path.read_bytes()[log_before:]
    assert len(log) < 4096, log[:4096]  # one short line per refusal kind, not the bodies
    assert b"yyyy" not in log and b"uvloop" not in log
    assert log.count(b"malformed") == 1  # 12 refusals, one line


def test_slowloris_is_closed_by_the_header_timeout_while_clients_are_served(proxy):
    slow = [_connect(proxy) for _ in range(12)]
    opened = time.monotonic()
    for sock in slow:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    served_meanwhile = 0
    closed_at: dict[int, float] = {}
    while len(closed_at) < len(slow) and time.monotonic() - opened < HEADER_TIMEOUT_S + 20:
        answer = http_request("GET", proxy.url + "/v1/models", timeout_s=10)
        assert answer.status == 200, answer
        served_meanwhile += not closed_at
        for i, sock in enumerate(slow):
            if i in closed_at:
                continue
            try:
                sock.setblocking(True)
                sock.sendall(b"X-Slow: 1\r\n")  # a byte now and then does not extend it
            except OSError:
                closed_at[i] = time.monotonic() - opened
                continue
            if _closed(sock):
                closed_at[i] = time.monotonic() - opened
        time.sleep(0.2)
    for sock in slow:
        sock.close()
    assert len(closed_at) == len(slow), f"still open after {HEADER_TIMEOUT_S + 20} s"
    assert min(closed_at.values()) >= HEADER_TIMEOUT_S * 0.9, closed_at
    assert served_meanwhile >= 1


def test_idle_connections_per_client_are_capped(proxy):
    opened = time.monotonic()
    idle = [_connect(proxy) for _ in range(MAX_IDLE + 10)]
    try:
        answer = http_request("GET", proxy.url + "/v1/models")  # the loop has seen them all
        assert answer.status == 200
        # The oldest idle ones were closed at once (long before the header timeout).
        left_s = opened + HEADER_TIMEOUT_S * 0.8 - time.monotonic()
        states = wait_for(lambda: s if sum(s := [_closed(c) for c in idle]) >= 10 else None,
                          left_s, "the oldest idle connections closed", every_s=0.05)
        assert all(states[:10]), states
        assert sum(states) <= 11  # the newest stay (the request above used one idle slot)
        closed = proxy.metrics()[("vllm_cutover_idle_connections_closed_total", frozenset())]
        assert closed >= 10
    finally:
        for sock in idle:
            sock.close()


def test_a_request_being_received_is_not_closed_as_idle(proxy):
    """The oldest connection has sent half its request head when more idle connections
    than the cap arrive: it is not idle, so it stays open and its request is answered."""
    sending = _connect(proxy)
    body = json.dumps({"model": "sim-model", "prompt": "hi", "max_tokens": 2}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
    sending.sendall(head[:40])
    time.sleep(0.3)  # the proxy has read those bytes before the crowd arrives
    crowd = [_connect(proxy) for _ in range(MAX_IDLE + 5)]
    try:
        assert http_request("GET", proxy.url + "/v1/models").status == 200
        wait_for(lambda: sum(_closed(c) for c in crowd) >= 5 or None, HEADER_TIMEOUT_S * 0.8,
                 "the cap closed the oldest idle connections", every_s=0.05)
        sending.setblocking(True)
        sending.sendall(head[40:] + b"Connection: close\r\n\r\n" + body)
        answer = b""
        while chunk := sending.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b'"choices"' in answer
    finally:
        sending.close()
        for sock in crowd:
            sock.close()


def test_a_stream_longer_than_the_header_timeout_is_not_cut(proxy):
    port = int(proxy.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    tokens = int(HEADER_TIMEOUT_S * 1.2 * 1000 / ITL_MS)
    try:
        conn.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                     body=json.dumps({"model": "sim-model", "prompt": "long", "stream": True,
                                      "max_tokens": tokens}))
        started = time.monotonic()
        resp = conn.getresponse()
        # More idle connections than the cap, while the stream's own is busy: the cap
        # closes idle ones only.
        idle = [_connect(proxy) for _ in range(MAX_IDLE + 5)]
        folded = fold_stream(sse_events(resp.read()))
        for sock in idle:
            sock.close()
        assert resp.status == 200 and time.monotonic() - started > HEADER_TIMEOUT_S
        assert folded["choices"][0]["finish_reason"] == "length"
        conn.request("GET", "/v1/models")  # the same connection: its timer started again
        again = conn.getresponse()
        assert again.status == 200 and again.read()
    finally:
        conn.close()
