"""Per-stage CPU cost of capturing one mirrored request, as the proxy's capture worker does it.

One request of the latency scenario (POST /v1/completions, 64 tokens streamed, temperature
0; the shadow asked for token ids, the baseline unstreamed) through each stage the proxy
runs for it beyond relaying the primary's answer to the client:

  hand-over        the primary's payloads held, pickled, sent over a socketpair, read and
                   unpickled (relay and worker side together)
  reads            the worker's HTTP/1.1 client reading the shadow's stream and the
                   baseline's body over loopback from the inline backend (another process,
                   one event every 2 ms, 32 requests at once): sockets, de-chunking, the
                   event loop; a feed that does nothing
  SSE framing      SSEDecoder.feed_data on the primary's and the shadow's events
  JSON             each event's JSON (CaptureBuilder's batched parse), the baseline's body
  fields           the rest of CaptureBuilder: choices, text, timing, the Capture
  token ids        the shadow's `token_ids`: its capture beyond the same events without ids
  compare+metrics  compare() for shadow and baseline, the metrics, the record object
  SQLite           SqliteStore.write in batches of 20 records (WAL), as the store's writer
  gate refresh     aggregates + verdict over 5,000 records, every 15 s at 80 requests/s
  whole worker     CaptureWorker.handle fed the relay's messages, against inline backends:
                   the worker's stages with its tasks, futures, writer thread and GC pacer

Figures are CPU time (time.process_time: user + system of this process, all threads;
the system part from getrusage, whose split is sampled at the clock tick), best of
--runs, per mirrored request and per client event. Another program on the
machine inflates CPU time much less than it inflates latency.

    python bench/capture_stages.py [--requests 320] [--runs 3] [--callgrind] [--json-out F]

--callgrind also counts the instructions of the stages without sockets under valgrind's
callgrind (a minute or two): unlike CPU time, the same on a busy machine as on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _backend import answer_events, full_answer
from _stage_parts import Cpu, Stream, cpu_now, handover, reads, whole_worker, with_backends
from prometheus_client import CollectorRegistry

from proxy.capture.builder import BATCH_EVENTS, CaptureBuilder, _parse_batch
from proxy.capture.request import prepare
from proxy.capture.sse import SSEDecoder
from proxy.capture.types import Capture
from proxy.compare.diff import compare
from proxy.compare.types import ExchangeRecord, RouteStamp
from proxy.evidence.store import SqliteStore
from proxy.gate.verdict import GateCriteria
from proxy.metrics import ProxyMetrics
from proxy.mirror.judging import _evaluate

TOKENS = 64
ITL_S = 0.002
STORE_BATCH = 20  # records per write: 80 requests/s over the writer's 0.25 s linger
GATE_RECORDS = 5000
GATE_EVERY_S, REQUESTS_PER_S = 15.0, 80.0
DONE = b"data: [DONE]\n\n"


def _events(token_ids: bool) -> Stream:
    payloads = [*answer_events(TOKENS, token_ids=token_ids), DONE]
    return Stream(payloads, [1.0 + i * ITL_S for i in range(len(payloads))])


def _sse(streams: Sequence[Stream]) -> Callable[[], None]:
    def run() -> None:
        for stream in streams:
            decoder = SSEDecoder()
            for payload in stream.payloads:
                decoder.feed_data(payload)
            decoder.flush_data()
    return run


def _json(streams: Sequence[Stream], body: bytes | None) -> Callable[[], None]:
    datas = [[p[6:-2] for p in s.payloads] for s in streams]

    def run() -> None:
        for each in datas:
            for i in range(0, len(each), BATCH_EVENTS):
                _parse_batch(each[i:i + BATCH_EVENTS])
        if body is not None:
            json.loads(body)
    return run


def _capture(stream: Stream | None, body: bytes | None = None, role: str = "primary") -> Capture:
    builder = CaptureBuilder(role, role, 0.5, stream=stream is not None)  # type: ignore[arg-type]
    if stream is not None:
        for payload, t in zip(stream.payloads, stream.times):
            builder.on_chunk(payload, t)
    if body is not None:
        builder.on_body(body, 1.2)
    return builder.finish(200, 1.3)


def _captures(streams: Sequence[Stream], body: bytes | None) -> Callable[[], None]:
    def run() -> None:
        for stream in streams:
            _capture(stream)
        if body is not None:
            _capture(None, body)
    return run


def _run(coro: Coroutine[Any, Any, Cpu]) -> Cpu:
    """On uvloop where installed, as the proxy and its worker run."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def cpu_per_call(fn: Callable[[], object], calls: int, runs: int) -> Cpu:
    """Best of `runs`: CPU seconds per call of `fn` (and their system part)."""
    best = (float("inf"), 0.0)
    for _ in range(runs):
        start = cpu_now()
        for _ in range(calls):
            fn()
        end = cpu_now()
        best = min(best, ((end[0] - start[0]) / calls, (end[1] - start[1]) / calls))
    return best


def _client_body() -> bytes:
    return json.dumps({"prompt": "The benchmark prompt.", "max_tokens": TOKENS,
                       "ignore_eos": True, "temperature": 0, "stream": True}).encode()


def pure_stages(tmp: Path) -> dict[str, tuple[Callable[[], object], int]]:
    """The stages without sockets: name -> (one call, mirrored requests per call)."""
    primary, shadow, bare = _events(False), _events(True), _events(False)
    body = full_answer(TOKENS)
    prepared = prepare(_client_body(), "completions")
    assert prepared is not None
    meta = prepared.meta
    captures = (_capture(primary), _capture(shadow, role="shadow"),
                _capture(None, body, role="baseline"))
    metrics = ProxyMetrics(CollectorRegistry())

    def record() -> ExchangeRecord:
        p, s, b = captures
        comparisons = (compare(p, s, meta, "shadow"), compare(p, b, meta, "baseline"))
        for capture in captures:
            metrics.observe_capture(capture, "completions", count_request=capture is not p)
        metrics.observe_comparisons(comparisons, True)
        metrics.token_id_source.labels("equal_text").inc()
        return ExchangeRecord("bench", 1.0, meta, captures, comparisons,
                              token_ids_source="equal_text",
                              routes=RouteStamp(1, "http://old", "http://new"))

    store = SqliteStore(str(tmp / "stages.sqlite"))
    batch = [record() for _ in range(STORE_BATCH)]
    return {
        "sse": (_sse([primary, bare]), 1), "json": (_json([primary, bare], body), 1),
        "captures": (_captures([primary, bare], body), 1),
        "with ids": (_captures([primary, shadow], body), 1),
        "compare+metrics": (record, 1),
        "SQLite": (lambda: store.write(batch), STORE_BATCH),
    }


def by_stage(one: dict[str, Cpu]) -> dict[str, Cpu]:
    """Per-request cost of each stage from the pure stages' measures."""
    def minus(a: Cpu, *others: Cpu) -> Cpu:
        return a[0] - sum(o[0] for o in others), a[1] - sum(o[1] for o in others)

    return {
        "SSE framing": one["sse"], "JSON": one["json"],
        "fields": minus(one["captures"], one["sse"], one["json"]),
        "token ids": minus(one["with ids"], one["captures"]),
        "compare+metrics": one["compare+metrics"], "SQLite": one["SQLite"],
    }


def measure(requests: int, runs: int, tmp: Path) -> dict[str, Cpu]:
    """CPU seconds per mirrored request (and their system part), by stage."""
    stages = pure_stages(tmp)
    per_call = {name: (cpu_per_call(fn, max(1, requests // per), runs), per)
                for name, (fn, per) in stages.items()}
    cost = by_stage({name: (c[0] / per, c[1] / per) for name, (c, per) in per_call.items()})
    store = SqliteStore(str(tmp / "gate.sqlite"))
    record = stages["compare+metrics"][0]
    for _ in range(GATE_RECORDS // STORE_BATCH):
        batch = [r for r in (record() for _ in range(STORE_BATCH))
                 if isinstance(r, ExchangeRecord)]
        assert len(batch) == STORE_BATCH
        store.write(batch)
    _evaluate(store, GateCriteria())  # loads scipy, as the worker does at its start
    gate = cpu_per_call(lambda: _evaluate(store, GateCriteria()), 1, runs)
    refreshes_per_request = 1 / (GATE_EVERY_S * REQUESTS_PER_S)
    cost["gate refresh"] = (gate[0] * refreshes_per_request, gate[1] * refreshes_per_request)
    store.close()
    primary = _events(False)
    cost["hand-over"] = _run(handover(primary, requests, runs))
    prepared = prepare(_client_body(), "completions")
    assert prepared is not None
    with with_backends(tmp, ITL_S) as urls:
        cost["reads"] = _run(reads(urls, prepared, requests, runs))
        cost["whole worker"] = _run(whole_worker(urls, prepared.request, primary, requests, runs,
                                                 tmp))
    return cost


def _callgrind_child(requests: int, tmp: Path) -> None:
    """Under callgrind: each pure stage run `requests` times, then twice that, a dump after
    each; the difference cancels the constant cost of a dump."""
    def dump(label: str) -> None:
        subprocess.run(["callgrind_control", f"--dump={label}", str(os.getpid())], check=True,
                       capture_output=True)

    for name, (fn, per) in pure_stages(tmp).items():
        calls = max(1, requests // per)
        dump(f"{name} pass0")
        for _ in range(calls):
            fn()
        dump(f"{name} pass1")
        for _ in range(2 * calls):
            fn()
        dump(f"{name} pass2")


def instructions(requests: int, tmp: Path) -> dict[str, Cpu]:
    """Instructions per mirrored request of the pure stages (valgrind's callgrind): the
    same on a busy machine as on an idle one."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--callgrind needs valgrind (Debian package `valgrind`)")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.%p",
            sys.executable, __file__, "--callgrind-child", "--requests", str(requests)]
    child = subprocess.run(argv, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise SystemExit(f"callgrind run failed ({child.returncode}): {child.stderr[-2000:]}")
    totals: dict[str, int] = {}
    for path in tmp.glob("cg.*"):
        text = path.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: dump (.+)$", text, re.MULTILINE)
        total = re.search(r"^summary: (\d+)$", text, re.MULTILINE)
        if label and total:
            totals[label.group(1)] = int(total.group(1))
    one = {}
    for name, (_, per) in pure_stages(tmp).items():
        calls = max(1, requests // per)
        one[name] = ((totals[f"{name} pass2"] - totals[f"{name} pass1"]) / (calls * per), 0.0)
    return by_stage(one)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true",
                        help="also count the instructions of the stages without sockets")
    parser.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="capture-stages-") as tmp:
        if args.callgrind_child:
            _callgrind_child(args.requests, Path(tmp))
            return
        cost = measure(args.requests, args.runs, Path(tmp))
        counted = instructions(max(20, args.requests // 8), Path(tmp)) if args.callgrind else {}
    stages = [k for k in cost if k != "whole worker"]
    cost["sum of stages"] = (sum(cost[k][0] for k in stages), sum(cost[k][1] for k in stages))
    print(f"Per mirrored request ({TOKENS} client events): CPU time best of {args.runs} x "
          f"{args.requests}, load average {os.getloadavg()[0]:.1f}"
          + ("; instructions: callgrind" if counted else ""))
    print(f"  {'stage':<18} {'us/request':>10} {'of it system':>12} {'us/event':>8}"
          + (f" {'instructions/request':>20}" if counted else ""))
    for name in [*stages, "sum of stages", "whole worker"]:
        total, system = cost[name]
        line = f"  {name:<18} {total * 1e6:10.1f} {system * 1e6:12.1f} {total * 1e6 / TOKENS:8.2f}"
        if name in counted:
            line += f" {counted[name][0]:20,.0f}"
        print(line)
    if args.json_out:
        document = {"cpu_us_per_request": {k: v[0] * 1e6 for k, v in cost.items()},
                    "system_us_per_request": {k: v[1] * 1e6 for k, v in cost.items()},
                    "instructions_per_request": {k: v[0] for k, v in counted.items()}}
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
