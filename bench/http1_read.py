"""The upstream client's read path against an earlier version of it, in one process.

    python bench/http1_read.py                      # against e66da52 (before framing.py)
    python bench/http1_read.py --reference-rev REV --rounds 7

The reference is the HTTP/1.1 client (`proxy/mirror/upstream/http1.py`) as of REV (read
with `git show`), loaded beside the current one; both parse the same answers from a fake transport on one event loop, in
interleaved rounds. Printed per scenario: microseconds per answer for each, and the
ratio current / reference per round (median [min..max]). Scenarios: an SSE stream of 256
chunked events read one chunk per read (engine pacing), the same in 64 KiB reads (a
burst), the same cut at every 1000 bytes (chunks split across reads), and a short JSON
answer with a Content-Length (the head dominates: the per-request cost).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import Any

from proxy.mirror.upstream import http1

ROOT = Path(__file__).resolve().parents[1]

HEAD = (b"HTTP/1.1 200 OK\r\ndate: Fri, 04 Dec 2026 15:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")
EVENT = b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" w"}]}\n\n'


# A transport whose calls do nothing: only the parsing is timed.
_Transport = type("_Transport", (), {name: lambda self, *args: None for name in (
    "write", "close", "abort", "pause_reading", "resume_reading")})


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def scenarios() -> dict[str, list[bytes]]:
    chunks = [_chunk(EVENT) for _ in range(256)] + [_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
    stream = b"".join(chunks)
    json_body = b'{"id":"cmpl-1","choices":[{"index":0,"text":"Hello world"}]}'
    return {
        "sse, a chunk per read": [HEAD, *chunks],
        "sse, 64 KiB reads": [HEAD + stream[:65536 - len(HEAD)], stream[65536 - len(HEAD):]],
        "sse, 1000-byte reads": [(HEAD + stream)[i:i + 1000]
                                 for i in range(0, len(HEAD) + len(stream), 1000)],
        "json, Content-Length": [b"HTTP/1.1 200 OK\r\ndate: Fri, 04 Dec 2026 15:00:00 GMT\r\n"
                                 b"server: uvicorn\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n" % len(json_body) + json_body],
    }


def _at_rev(rev: str) -> bytes:
    """The client as of `rev`: proxy/mirror/upstream/http1.py, or proxy/mirror/http1.py
    before the mirror had rooms."""
    for path in ("proxy/mirror/upstream/http1.py", "proxy/mirror/http1.py"):
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT,
                               capture_output=True, check=False)
        if shown.returncode == 0:
            return shown.stdout
    raise SystemExit(f"http1_read: no HTTP/1.1 client at {rev!r}")


def load_reference(rev: str, file: Path | None) -> types.ModuleType:
    source = file.read_bytes() if file is not None else _at_rev(rev)
    # A client from before proxy/mirror had rooms imports its neighbours from their old place.
    source = source.replace(b"from proxy.mirror.stamped import",
                            b"from proxy.mirror.upstream.stamped import")
    path = Path(tempfile.mkdtemp(prefix="http1-reference-")) / "http1_reference.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("http1_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


async def per_answer_us(connection: Callable[[], Any], reads: list[bytes], answers: int) -> float:
    """Microseconds per answer: send, head, attach, body to the end, on one connection."""
    conn = connection()
    conn.transport = _Transport()
    received = 0

    def feed(data: bytes, t: float) -> None:
        nonlocal received
        received += len(data)

    start = perf_counter()
    for _ in range(answers):
        head = conn.send(b"POST / HTTP/1.1\r\n\r\n")
        done = None
        for data in reads:
            conn.data_received(data)
            if done is None and head.done():
                done = conn.attach(feed)
        assert done is not None and done.done() and done.exception() is None
    elapsed = perf_counter() - start
    assert received > 0
    return elapsed / answers * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-rev", default="e66da52")
    parser.add_argument("--reference-file", type=Path, default=None,
                        help="the reference http1.py itself (where git is not at hand)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per scenario and side")
    args = parser.parse_args(argv)
    reference = load_reference(args.reference_rev, args.reference_file)
    sides = {"reference": reference.Http1Connection, "current": http1.Http1Connection}
    loop = asyncio.new_event_loop()
    print(f"http1_read: current checkout vs {args.reference_file or args.reference_rev}, "
          f"{args.rounds} interleaved "
          f"rounds of ~{args.seconds:g} s per scenario and side")
    print(f"{'scenario':24s} {'reference us/answer':>24s} {'current us/answer':>24s} "
          f"{'current / reference':>26s}")
    for name, reads in scenarios().items():
        warm = loop.run_until_complete(per_answer_us(sides["current"], reads, 50))
        answers = max(20, int(args.seconds * 1e6 / warm))
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, connection in sides.items():
                times[side].append(loop.run_until_complete(
                    per_answer_us(connection, reads, answers)))
        ratios = [c / r for c, r in zip(times["current"], times["reference"])]
        print(f"{name:24s} {_spread(times['reference']):>24s} {_spread(times['current']):>24s} "
              f"{_spread(ratios, '.3f'):>26s}")
    loop.close()
    return 0


def _spread(values: list[float], fmt: str = ".1f") -> str:
    return (f"{statistics.median(values):{fmt}} [{min(values):{fmt}}.."
            f"{max(values):{fmt}}]")


if __name__ == "__main__":
    sys.exit(main())
