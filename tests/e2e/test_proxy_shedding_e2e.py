"""Shedding at the proxy's defaults, end to end.

Light traffic on a host whose CPUs other processes keep busy (as vLLM's API server,
detokenizer and engine loop do on a GPU host) is mirrored in full; a proxy that is
itself saturated sheds mirrors, and the gate, the report, /admin/stats and /metrics
say how many and why. The proxy runs with every shedding knob at its default.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, total, wait_for
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn
from tests.e2e.vllm_servers import Trio

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPTS = ("The quick brown fox", "Hello world, this is", "Paris is the capital of",
           "A cutover moves traffic from the old server", "One two three four five")
COVERAGE_REASON = re.compile(
    r"^(pass|inconclusive): (\d+) of (\d+) sampled requests mirrored \(([\d.]+)%, minimum 50%\)"
    r"(; (\d+) shed \(([\d.]+)%\): (.+))?$")


def _body(i: int) -> tuple[str, dict[str, Any]]:
    """Chat streamed and completions in turn, greedy (every one is compared)."""
    prompt = f"{PROMPTS[i % len(PROMPTS)]} {i}"
    common: dict[str, Any] = {"model": "tiny", "max_tokens": 16, "temperature": 0}
    if i % 2 == 0:
        return "/v1/chat/completions", {
            **common, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    return "/v1/completions", {**common, "prompt": prompt}


@contextmanager
def cpus_kept_busy() -> Iterator[None]:
    """One CPU-bound process per CPU at normal priority, as a GPU host's engine processes."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def send(proxy: RunningProxy, count: int, streams: int) -> None:
    """`count` requests over `streams` concurrent clients, each one at a time."""
    left = iter(range(count))
    lock = threading.Lock()
    statuses: list[int] = []

    def client() -> None:
        while True:
            with lock:
                i = next(left, None)
            if i is None:
                return
            path, body = _body(i)
            statuses.append(http_request("POST", proxy.url + path, body).status)

    threads = [threading.Thread(target=client) for _ in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * count


def recorded(proxy: RunningProxy) -> dict[str, Any] | None:
    """The stats once every mirrored request is recorded and compared on both sides."""
    stats = proxy.stats()
    admission = stats["admission"]
    if stats["live"]["shadow_inflight"] or stats["records"] < admission["mirrored"]:
        return None
    return stats


@pytest.mark.vllm
@pytest.mark.parametrize(("streams", "count"), [(1, 40), (8, 64)],
                         ids=["one-at-a-time", "eight-streams"])
def test_light_load_on_a_busy_host_is_mirrored_in_full(trio: Trio, tmp_path: Path,
                                                       streams: int, count: int) -> None:
    with start_proxy(tmp_path, trio.old_a.url, trio.different.url,
                     baseline=trio.old_b.url) as proxy:
        with cpus_kept_busy():
            send(proxy, count, streams)
        stats = wait_for(lambda: recorded(proxy), 180, "every mirror recorded")
        report = proxy.report_json()
        gate = proxy.admin("/admin/gate").json()
    assert stats["admission"]["eligible"] == report["admission"]["eligible"] == count
    assert stats["admission"]["drop_rate"] <= 0.05, stats["admission"]
    assert report["compared"] >= 0.95 * count, report["admission"]
    assert report["baseline"]["compared"] >= 0.95 * count
    (reason,) = [r for r in gate["reasons"] if COVERAGE_REASON.match(r)]
    assert reason.startswith("pass: "), gate["reasons"]
    assert stats["live"]["capture_worker"]["scheduling"] == "nice 10"


@contextmanager
def sims(work_dir: Path, count: int) -> Iterator[list[str]]:
    """`count` simulated vLLM servers, unpaced (tokens as fast as they can be made)."""
    started: list[ServerProcess] = []
    try:
        for i in range(count):
            port = free_port()
            argv = [sys.executable, "-m", "proxy", "--log-level", "WARNING", "sim",
                    "--host", HOST, "--port", str(port)]
            started.append(spawn(argv, port=port, log_path=work_dir / f"sim-{i}.log"))
        for sim in started:
            sim.wait_ready(60)
        yield [sim.url for sim in started]
    finally:
        for sim in started:
            sim.stop()


async def _stream_for(url: str, duration_s: float, body: bytes) -> list[bytes]:
    """Back-to-back streamed requests on one keep-alive connection; each answer's status line.

    Reads raw bytes up to the end of the chunked body and parses nothing else, so the
    client costs little CPU next to the proxy it is meant to saturate.
    """
    host, port = url.split("://", 1)[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    statuses: list[bytes] = []
    deadline = time.monotonic() + duration_s
    try:
        while time.monotonic() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n")
            statuses.append(head.split(b" ")[1])
            tail = b""
            while not (tail := tail[-16:] + await reader.read(65536)).endswith(b"\r\n0\r\n\r\n"):
                assert not reader.at_eof(), "the proxy closed the connection mid-answer"
    finally:
        writer.close()
    return statuses


def saturate(url: str, streams: int, duration_s: float) -> list[bytes]:
    body = json.dumps({"model": "sim-model", "prompt": "hello", "max_tokens": 256,
                       "temperature": 0, "stream": True, "ignore_eos": True}).encode()

    async def run() -> list[bytes]:
        answers = await asyncio.gather(*(_stream_for(url, duration_s, body)
                                         for _ in range(streams)))
        return [status for statuses in answers for status in statuses]

    return asyncio.run(run())


def test_a_saturated_proxy_sheds_and_says_how_much(tmp_path: Path) -> None:
    with sims(tmp_path, 3) as (primary, shadow, baseline), \
            start_proxy(tmp_path, primary, shadow, baseline=baseline) as proxy:
        statuses = saturate(proxy.url, streams=32, duration_s=8.0)
        stats = wait_for(lambda: recorded(proxy), 120, "every mirror recorded")
        gate = proxy.admin("/admin/gate").json()
        metrics = proxy.metrics()
    report = proxy.report_json()
    assert statuses and set(statuses) == {b"200"}  # every client was served
    admission = stats["admission"]
    shed, eligible = admission["shed_total"], admission["eligible"]
    assert eligible == len(statuses) and shed > 0, admission
    assert admission["drop_rate"] == pytest.approx(shed / eligible)
    (reason,) = [m for r in gate["reasons"] if (m := COVERAGE_REASON.match(r))]
    assert (int(reason[2]), int(reason[3]), int(reason[6])) == (eligible - shed, eligible, shed)
    assert float(reason[7]) == pytest.approx(100 * shed / eligible, abs=0.051)
    named = dict(part.rsplit(" ", 1) for part in reason[8].split(", "))
    assert {k: int(v) for k, v in named.items()} == admission["shed"]
    if shed / eligible > 0.5:
        assert reason[1] == "inconclusive" and gate["verdict"] != "pass"
    assert total(metrics, "vllm_cutover_shadow_sampled_total") == eligible
    assert total(metrics, "vllm_cutover_shadow_dropped_total") == shed
    assert report["admission"] == admission  # the counts are in the records file
    assert reason.string in report["reasons"]
