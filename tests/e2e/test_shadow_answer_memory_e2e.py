"""Large shadow answers against the real proxy and its capture worker process.

A shadow that answers 200 MB to each of 40 concurrent mirrored requests (the issue 33
probe): each capture stops at the answer cap (`too_large`, the rest not read), the
clients get the primary's answers, and the worker's RSS (read from /proc) is back within
2x its idle size within 30 s. Before: 5.5 GB kept after 60 s of 1 kB-event streams; the
JSON bodies until the next full collection (53 s).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proxy.demo.processes import sim_ready, spawn_sim
from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, wait_for

pytestmark = pytest.mark.e2e
ANSWER_BYTES = 200 * 1000 * 1000
CONCURRENT = 40
# The issue asks for a minute; half, so that main's one full collection a minute, which
# freed the JSON bodies at a time of its choosing (53 s after the burst once), is no pass.
GIVEN_BACK_WITHIN_S = 30
BODY = {"model": "sim-model", "prompt": "large", "max_tokens": 4, "temperature": 0}


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(params=["json", "sse"])
def huge_shadow(request: pytest.FixtureRequest) -> Iterator[str]:
    """An OpenAI-shaped server whose every POST answer is 200 MB, written as fast as the
    reader takes it: one JSON body (a choice whose text never ends), or a stream of
    1 kB text events."""
    sse = request.param == "sse"
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536) or b"\r\n\r\n"
            if head.startswith(b"GET"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                             b"Connection: close\r\n\r\n{}")
                return
            if sse:
                event = b'data: {"choices": [{"index": 0, "text": "' + b"y" * 1000 + b'"}]}\n\n'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Connection: close\r\n\r\n")
                piece = event * (1_000_000 // len(event))
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n"
                             % ANSWER_BYTES + b'{"choices": [{"index": 0, "text": "')
                piece = b"x" * 1_000_000
            try:
                for _ in range(ANSWER_BYTES // len(piece)):
                    conn.sendall(piece)
            except OSError:
                pass  # the proxy stopped reading at its cap

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: the test is over
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


@pytest.fixture
def proxy(tmp_path: Path, huge_shadow: str) -> Iterator[RunningProxy]:
    process = spawn_sim(["--version", "old"], tmp_path / "sim.log")
    sim = sim_ready("old", process, tmp_path / "sim.log")
    try:
        with start_proxy(tmp_path / "proxy", sim.url, huge_shadow) as running:
            yield running
    finally:
        sim.stop()


def test_forty_200mb_shadow_answers_are_capped_and_the_worker_gives_memory_back(proxy):
    worker_pid = proxy.stats()["live"]["capture_worker"]["pid"]
    warm = http_request("POST", proxy.url + "/v1/completions", body=BODY)
    assert warm.status == 200
    wait_for(lambda: proxy.stats()["live"]["shadow_inflight"] == 0 or None, 60, "warm-up")
    time.sleep(2)
    idle = _rss_bytes(worker_pid)
    peak = [idle]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.1):
            peak[0] = max(peak[0], _rss_bytes(worker_pid))

    threading.Thread(target=sample, daemon=True).start()
    with ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(lambda _: http_request(
            "POST", proxy.url + "/v1/completions", body=BODY, timeout_s=120),
            range(CONCURRENT)))
    assert all(a.status == 200 and json.loads(a.body)["choices"] for a in answers)
    wait_for(lambda: proxy.stats()["live"]["shadow_inflight"] == 0 or None, 120,
             "the shadow captures ended")
    burst_end = time.monotonic()
    after: list[tuple[float, int]] = []
    while time.monotonic() - burst_end < GIVEN_BACK_WITHIN_S:
        after.append((time.monotonic() - burst_end, _rss_bytes(worker_pid)))
        if after[-1][1] <= 2 * idle:
            break
        time.sleep(1)
    sampling.set()
    figures = (f"worker RSS idle {idle / 2**20:.0f} MiB, peak {peak[0] / 2**20:.0f} MiB, "
               f"after the burst {[(round(t), round(r / 2**20)) for t, r in after]}")
    print(figures)
    assert after[-1][1] <= 2 * idle, figures

    def shadow_errors() -> dict[str, int] | None:
        with sqlite3.connect(proxy.db_path) as db:
            rows = db.execute("SELECT error, count(*) FROM capture WHERE role = 'shadow' "
                              "GROUP BY error").fetchall()
        return dict(rows) if sum(n for _, n in rows) > CONCURRENT else None

    errors = wait_for(shadow_errors, 30, "every shadow capture recorded")
    assert errors == {"too_large": CONCURRENT + 1}, errors  # and the warm-up
