"""Load generator: streaming /v1/completions over raw keep-alive HTTP/1.1 connections.

aiohttp's client costs more CPU per SSE event than the proxy under test spends relaying
it, so on two cores it cannot saturate a relay; each stream here is an `SSEStream`
(asyncio Protocol, `_sse_client.py`) in a closed loop. The load is split over several
processes (`run_load`), each with its own event loop and CPU affinity; TTFTs count for
requests started inside the measurement window, events for those arriving inside it.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from _procs import raise_nofile
from _sse_client import SSEStream


@dataclass(frozen=True)
class LoadSpec:
    """What one load run does: `concurrency` closed-loop streams for `duration_s`."""

    port: int
    concurrency: int
    duration_s: float
    warmup_s: float
    max_tokens: int
    processes: int = 1
    cpus: tuple[int, ...] = ()
    path: str = "/v1/completions"
    stagger_s: float = 0.0  # stream i starts i/concurrency * stagger_s late, so starts spread


@dataclass
class LoadResult:
    """Merged figures of all load processes; TTFTs of requests started after warm-up."""

    ttfts_s: list[float] = field(default_factory=list)
    e2es_s: list[float] = field(default_factory=list)
    events: int = 0
    window_s: float = 0.0
    completed: int = 0
    streaming_at_end: int = 0  # streams between their first event and their end when the window closed
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / self.window_s if self.window_s > 0 else 0.0


def _record_ttft(stream: SSEStream | None, t_warm: float, t_end: float, out: LoadResult) -> bool:
    """Keep the TTFT of a request started in the window (also one cut off at its end)."""
    if stream is None or not stream.t_first or not t_warm <= stream.t_start <= t_end:
        return False
    out.ttfts_s.append(stream.t_first - stream.t_start)
    return True


async def _worker(
    spec: LoadSpec,
    request: bytes,
    t_start: float,
    t_warm: float,
    t_end: float,
    out: LoadResult,
    counter: list[int],
) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, t_start - time.perf_counter()))
    stream: SSEStream | None = None
    while time.perf_counter() < t_end:
        try:
            if stream is None or stream.closed.done():
                _, stream = await loop.create_connection(
                    lambda: SSEStream(request, counter), "127.0.0.1", spec.port
                )
            await asyncio.wait_for(stream.send(), timeout=max(0.01, t_end - time.perf_counter()))
        except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
            if time.perf_counter() >= t_end - 0.05:
                _record_ttft(stream, t_warm, t_end, out)
                break
            out.errors += 1
            if len(out.error_samples) < 3:
                out.error_samples.append(repr(exc))
            if stream is not None:
                stream.close()
                stream = None
            await asyncio.sleep(0.01)
            continue
        if stream.status != 200 or not stream.t_first:
            out.errors += 1
            if len(out.error_samples) < 3:
                out.error_samples.append(f"status {stream.status}, first event {bool(stream.t_first)}")
            continue
        out.completed += 1
        if _record_ttft(stream, t_warm, t_end, out):
            out.e2es_s.append(time.perf_counter() - stream.t_start)
    if stream is not None:
        stream.close()


async def _run_process(spec: LoadSpec, first: int, concurrency: int, t_begin: float) -> LoadResult:
    body = json.dumps(
        {
            "prompt": "The benchmark prompt.",
            "max_tokens": spec.max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
        }
    ).encode()
    request = (
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
        % (spec.path.encode(), spec.port, len(body), body)
    )
    out = LoadResult()
    counter = [0, 0]
    await asyncio.sleep(max(0.0, t_begin - time.perf_counter()))
    t_warm = t_begin + spec.warmup_s
    t_end = t_warm + spec.duration_s
    tasks = [
        asyncio.create_task(
            _worker(spec, request, t_begin + spec.stagger_s * (first + i) / spec.concurrency,
                    t_warm, t_end, out, counter)
        )
        for i in range(concurrency)
    ]
    await asyncio.sleep(max(0.0, t_warm - time.perf_counter()))
    events_at_warm = counter[0]
    # Sampled just before the end: at t_end the workers' own timeouts start closing streams.
    await asyncio.sleep(max(0.0, t_end - 0.05 - time.perf_counter()))
    out.streaming_at_end = counter[1]
    await asyncio.sleep(max(0.0, t_end - time.perf_counter()))
    out.events = counter[0] - events_at_warm
    out.window_s = spec.duration_s
    await asyncio.wait(tasks, timeout=5.0)
    for task in tasks:
        task.cancel()
    return out


def _process_main(
    spec: LoadSpec, first: int, concurrency: int, t_begin: float, conn: object
) -> None:
    if spec.cpus:
        os.sched_setaffinity(0, set(spec.cpus))
    raise_nofile()
    result = run_async(_run_process(spec, first, concurrency, t_begin))
    conn.send(result)  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]


def run_load(spec: LoadSpec, on_window: Callable[[str], None] | None = None) -> LoadResult:
    """Run the load in `spec.processes` processes and merge their results.

    `on_window("start")` and `on_window("end")` are called (from timer threads) when the
    measurement window opens and closes, to sample a server's CPU time or memory.
    """
    ctx = mp.get_context("fork")
    shares = [spec.concurrency // spec.processes] * spec.processes
    for i in range(spec.concurrency % spec.processes):
        shares[i] += 1
    t_begin = time.perf_counter() + 0.3
    procs, pipes = [], []
    first = 0
    for share in shares:
        if share == 0:
            continue
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_process_main, args=(spec, first, share, t_begin, child), daemon=True
        )
        first += share
        proc.start()
        procs.append(proc)
        pipes.append(parent)
    timers = []
    if on_window is not None:
        for label, at in (("start", t_begin + spec.warmup_s), ("end", t_begin + spec.warmup_s + spec.duration_s)):
            timer = threading.Timer(max(0.0, at - time.perf_counter()), on_window, (label,))
            timer.start()
            timers.append(timer)
    merged = LoadResult(window_s=spec.duration_s)
    deadline = t_begin + spec.warmup_s + spec.duration_s + 30
    for proc, pipe in zip(procs, pipes):
        if pipe.poll(max(0.1, deadline - time.perf_counter())):
            part: LoadResult = pipe.recv()
            merged.ttfts_s += part.ttfts_s
            merged.e2es_s += part.e2es_s
            merged.events += part.events
            merged.completed += part.completed
            merged.streaming_at_end += part.streaming_at_end
            merged.errors += part.errors
            merged.error_samples += part.error_samples
        else:
            merged.errors += 1
            merged.error_samples.append("load process gave no result")
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    for timer in timers:
        timer.join()
    return merged


def run_async(coro: object) -> LoadResult:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]
