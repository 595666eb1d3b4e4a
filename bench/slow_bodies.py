"""Trickling request bodies against the real proxy: closed at `--body-timeout`.

N connections (default 3,000, the issue 33 probe) each send a request head announcing
`Content-Length: 99000`, then one body byte every `--every` seconds. The proxy runs as
its own process in front of a simulator; the run prints when each connection was
answered 408 and closed, and that a normal request is served meanwhile.

    python bench/slow_bodies.py [--connections 3000] [--body-timeout 10] [--every 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from proxy.demo.processes import (
    free_port,
    sim_ready,
    spawn_sim,
    start_proxy,
    wait_http,
)

HEAD = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 99000\r\n\r\n")
PER_SOURCE_IP = 100  # under the proxy's idle cap per client IP (256)


async def _trickle(port: int, index: int, every_s: float,
                   out: dict[int, tuple[float, bytes]]) -> None:
    source = f"127.0.{33 + index // (PER_SOURCE_IP * 250)}.{index // PER_SOURCE_IP % 250 + 1}"
    reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                   local_addr=(source, 0))
    writer.write(HEAD + b"{")
    sent = time.monotonic()
    answer = b""
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), every_s)
            except asyncio.TimeoutError:
                writer.write(b" ")
                continue
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    out[index] = (time.monotonic() - sent, answer)
    writer.close()


async def _served(port: int) -> int:
    body = json.dumps({"model": "sim-model", "prompt": "hi", "max_tokens": 2}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                 + body)
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


async def run(connections: int, body_timeout_s: float, every_s: float, tmp: Path) -> int:
    sim = sim_ready("sim", spawn_sim([], tmp / "sim.log"), tmp / "sim.log")
    port, admin_port = free_port(), free_port()
    proxy = start_proxy(["--primary", sim.url, "--db", str(tmp / "records.db"),
                         "--body-timeout", str(body_timeout_s)],
                        port, admin_port, tmp / "proxy.log")
    try:
        await wait_http(proxy, proxy.url + "/v1/models")
        out: dict[int, tuple[float, bytes]] = {}
        tasks = [asyncio.create_task(_trickle(port, i, every_s, out))
                 for i in range(connections)]
        await asyncio.sleep(body_timeout_s / 2)
        served = await _served(port)
        await asyncio.wait(tasks, timeout=body_timeout_s + 60)
        closed = sorted(t for t, _ in out.values())
        answered_408 = sum(a.startswith(b"HTTP/1.1 408 ") for _, a in out.values())
        print(f"{connections} trickling bodies (Content-Length 99000, a byte every "
              f"{every_s:g} s), --body-timeout {body_timeout_s:g} s")
        print(f"  closed by the proxy: {len(closed)} of {connections}; answered 408: "
              f"{answered_408}")
        if closed:
            print(f"  closed after its head: first {closed[0]:.1f} s, median "
                  f"{statistics.median(closed):.1f} s, last {closed[-1]:.1f} s")
        print(f"  a normal request meanwhile: HTTP {served}")
        ok = (len(closed) == connections and answered_408 == connections and served == 200
              and closed[0] >= body_timeout_s * 0.9 and closed[-1] <= body_timeout_s + 15)
        return 0 if ok else 1
    finally:
        proxy.stop()
        sim.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--body-timeout", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between bytes")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.connections * 2 + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the proxy inherits it
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(args.connections, args.body_timeout, args.every, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
