"""Hostile input against the proxy as a real process in front of three simulated vLLMs.

A lone surrogate reaches every side as valid JSON and no mirror is lost uncounted; a
body without a length or over the limit gets a short JSON refusal and one log line;
slowloris connections are closed by the header timeout while normal requests are
served, bodies trickling in are closed by the body timeout, and idle connections per
client IP are capped.
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.demo.processes import Child, sim_ready, spawn_sim
from tests.e2e.proxy_fixtures import (
    ADMIN_TOKEN,
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
BODY_TIMEOUT_S = 4.0
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
                             "--body-timeout", str(BODY_TIMEOUT_S),
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


def test_trickling_bodies_are_closed_at_the_body_timeout_while_clients_are_served(proxy):
    """200 requests announce a 99,000-byte body and send one byte a second (the probe:
    one every 5 s): each is answered 408 and closed at the body timeout, though bytes keep
    arriving, while a body that arrives in time (in two parts) is served."""
    log_before = proxy.log_path.stat().st_size
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: 99000\r\n\r\n")
    # From 20 loopback addresses, 10 each: under the idle cap per client IP (24).
    port = int(proxy.url.rsplit(":", 1)[1])
    slow = [socket.create_connection((HOST, port), timeout=10,
                                     source_address=(f"127.0.33.{i % 20 + 1}", 0))
            for i in range(200)]
    opened = time.monotonic()
    for sock in slow:
        sock.sendall(head + b"{")
    body = json.dumps({"model": "sim-model", "prompt": "hi", "max_tokens": 2}).encode()
    in_time = _connect(proxy)
    in_time.sendall(head.replace(b"99000", str(len(body)).encode()) + body[:10])
    answers: dict[int, bytes] = {}
    closed_at: dict[int, float] = {}
    sent_in_time = False
    while len(closed_at) < len(slow) and time.monotonic() - opened < BODY_TIMEOUT_S + 20:
        if not sent_in_time and time.monotonic() - opened > BODY_TIMEOUT_S / 2:
            in_time.sendall(body[10:])
            sent_in_time = True
        for i, sock in enumerate(slow):
            if i in closed_at:
                continue
            sock.setblocking(False)
            try:
                while chunk := sock.recv(65536):
                    answers[i] = answers.get(i, b"") + chunk
                closed_at[i] = time.monotonic() - opened
                continue
            except BlockingIOError:
                pass
            except OSError:
                closed_at[i] = time.monotonic() - opened
                continue
            try:
                sock.send(b" ")  # a byte now and then does not extend it
            except OSError:
                closed_at[i] = time.monotonic() - opened
        time.sleep(1.0)
    in_time.settimeout(10)
    served = in_time.recv(65536)
    for sock in [*slow, in_time]:
        sock.close()
    assert served.startswith(b"HTTP/1.1 200"), served[:200]
    assert len(closed_at) == len(slow), f"{len(slow) - len(closed_at)} still open"
    assert min(closed_at.values()) >= BODY_TIMEOUT_S * 0.9, sorted(closed_at.values())[:5]
    assert max(closed_at.values()) <= BODY_TIMEOUT_S + 5, sorted(closed_at.values())[-5:]
    assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers.values()) >= 190, answers
    assert proxy.metrics()[("vllm_cutover_proxy_errors_total",
                            frozenset({("status", "408")}))] >= 190
    log = proxy.log_path.read_bytes()[log_before:]
    assert log.count(b"--body-timeout") <= 2, log[:2000]  # one line per 10 s, counted


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


def _post_raw(proxy: RunningProxy, path: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """POST `raw` bytes as they are (http_request would re-encode them)."""
    host, port = proxy.url.rsplit("//", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def _counter(samples: dict[Any, float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


def test_the_request_is_read_by_its_meaning_and_an_unreadable_one_goes_to_the_primary(proxy):
    """Escaped stateful keys are what they mean (not mirrored, counted as such); a body
    nested deeper than the proxy reads reaches the primary as sent and is answered by it,
    not by the proxy, is not mirrored (counted), and the capture worker records on."""
    dropped, mirrored = "vllm_cutover_shadow_dropped_total", "vllm_cutover_shadow_mirrored_total"
    records_before = _settled_records(proxy)  # an earlier test's exchanges all stored
    before = proxy.metrics()
    escaped = [rb'{"model":"sim-model","input":"hi","previous\u005fresponse_id":"resp_abc"}',
               rb'{"model":"sim-model","input":"hi","backgroun\u0064":true}']
    for raw in escaped:
        status, headers, _ = _post_raw(proxy, "/v1/responses", raw)
        assert "x-vllm-cutover-error" not in headers, status
    nest = 1500  # deeper than Python's parser goes by default, under --max-body-bytes
    deep = {"/v1/responses": b'{"model":"sim-model","background":false,"input":'
                             + b"[" * nest + b"]" * nest + b"}",
            "/v1/chat/completions": b'{"model":"sim-model","messages":'
                                    + b"[" * nest + b"]" * nest + b"}"}
    for path, raw in deep.items():
        assert len(raw) < MAX_BODY
        status, headers, body = _post_raw(proxy, path, raw)
        # The primary's own answer (the sim refuses such a body), never the proxy's.
        assert "x-vllm-cutover-error" not in headers, (path, status, body[:300])
        assert b"vllm_cutover_proxy_error" not in body, (path, status, body[:300])
    ok = http_request("POST", proxy.url + "/v1/completions",
                      body={"model": "sim-model", "prompt": "hi", "max_tokens": 2})
    assert ok.status == 200, ok
    # The one readable request is recorded: the worker did not die on the others.
    wait_for(lambda: proxy.stats()["records"] > records_before or None, 30, "its record")
    after = proxy.metrics()

    def delta(name: str, **labels: str) -> float:
        return _counter(after, name, **labels) - _counter(before, name, **labels)

    assert delta(dropped, reason="responses_previous_response") == 1
    assert delta(dropped, reason="responses_background") == 1
    assert delta(dropped, reason="malformed_json") == 2
    assert delta(mirrored, role="shadow") == 1  # the readable one only
    assert proxy.stats()["records"] == records_before + 1


def _settled_records(proxy: RunningProxy, quiet_s: float = 1.0) -> int:
    """The record count once it has not moved for `quiet_s` (the capture worker stores an
    exchange after its shadow answers, which may outlive the test that sent it)."""
    deadline = time.monotonic() + 30.0
    count, since = proxy.stats()["records"], time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the record count never settled"
        time.sleep(0.2)
        now = proxy.stats()["records"]
        if now != count:
            count, since = now, time.monotonic()
    return int(count)


def test_routes_that_lead_back_into_the_proxy_are_refused_naming_the_field(proxy):
    before = proxy.admin("/admin/routes").json()
    port = proxy.url.rsplit(":", 1)[1]
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for field, url in (("primary", proxy.url), ("shadow", f"http://localhost:{port}/"),
                       ("baseline", proxy.admin_url)):
        answer = http_request("PUT", proxy.admin_url + "/admin/routes", body={field: url},
                              headers=auth)
        assert answer.status == 400, (field, answer)
        message = answer.json()["error"]["message"]
        assert message.startswith(f"{field} ") and "own listener" in message, message
    assert proxy.admin("/admin/routes").json() == before
    ok = http_request("POST", proxy.url + "/v1/completions",
                      body={"model": "sim-model", "prompt": "hi", "max_tokens": 2})
    assert ok.status == 200, ok
