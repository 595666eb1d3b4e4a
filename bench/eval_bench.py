"""`eval compare`'s own cost: how many requests per second it replays and judges, against
the simulated engine (`vllm-cutover sim`, no TTFT or ITL: it answers as fast as it can).

Each round runs, in alternating order, (a) `eval compare` of a golden file recorded from
the same simulator (replay through the proxy's stream capture, then the verdict), and (b)
the reference measured in the same round: a bare aiohttp client that sends the same
requests at the same concurrency and reads every stream to its end without parsing it.
Figures (median [min..max] over rounds): requests/s of each, and the CPU each spends per
request in this process (the simulator runs in its own), i.e. the requests/s one core of
the client sustains. The target is on that capacity, so a busy simulator on a shared
machine does not decide it: a performance comparison must never be limited by `eval`.

    python bench/eval_bench.py [--rounds 3] [--requests 400] [--concurrency 16] [--tokens 64]
                               [--smoke] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for path in (BENCH_DIR, BENCH_DIR.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import aiohttp
from _figures import Figure, figure, render_table
from _procs import free_port, python, started

from proxy.evaluate.golden import read_golden
from proxy.evaluate.judge import CompareCriteria
from proxy.evaluate.prompts import EvalRequest, greedy_body
from proxy.evaluate.replaying import ReplaySettings, compare_golden, record

# 200 requests/s of 64-token answers is 12,800 tokens/s: more than one GPU serves one
# model at the concurrencies `eval perf` uses; one core of the client must keep up.
TARGET_CAPACITY_RPS = 200.0


def requests_for(n: int, tokens: int) -> list[EvalRequest]:
    return [EvalRequest("completions", greedy_body(
        {"prompt": f"benchmark prompt number {i}", "max_tokens": tokens}, "completions",
        logprobs=5, max_tokens=tokens), f"bench:{i}") for i in range(n)]


async def _bare(url: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    slots = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        async def one(body: dict[str, Any]) -> int:
            async with slots, http.post(url + "/v1/completions", json=body) as resp:
                return sum([len(c) async for c in resp.content.iter_any()])

        return sum(await asyncio.gather(*(one(b) for b in bodies)))


def timed(fn: Any) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(rounds: int, n: int, concurrency: int, tokens: int) -> tuple[list[Figure], dict[str, Any]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [python(), "-m", "proxy", "--log-level", "WARNING", "sim", "--port", str(port),
            "--ttft-ms", "0", "--itl-ms", "0"]
    with tempfile.TemporaryDirectory(prefix="eval-bench-") as work, \
            started(argv, port, "sim", Path(work)):
        golden_path = str(Path(work) / "golden.jsonl")
        requests = requests_for(n, tokens)
        settings = ReplaySettings(concurrency=concurrency)
        record(url, requests, golden_path, settings)
        golden = read_golden(golden_path)
        bodies = [e.request.body for e in golden.entries]
        criteria = CompareCriteria()
        raw: dict[str, list[float]] = {k: [] for k in ("eval_rps", "bare_rps", "eval_cpu_ms",
                                                       "bare_cpu_ms")}
        verdicts = []
        for r in range(rounds):
            order = ("bare", "eval") if r % 2 == 0 else ("eval", "bare")
            for side in order:
                if side == "bare":
                    wall, cpu = timed(lambda: asyncio.run(_bare(url, bodies, concurrency)))
                else:
                    found: list[str] = []
                    wall, cpu = timed(lambda out=found: out.append(
                        compare_golden(golden, url, None, settings, criteria).verdict))
                    verdicts += found
                raw[f"{side}_rps"].append(n / wall)
                raw[f"{side}_cpu_ms"].append(cpu * 1000 / n)
    capacity = [1000 / ms for ms in raw["eval_cpu_ms"]]
    figures = [
        figure("replay", "eval compare requests/s", raw["eval_rps"], "req/s",
               reference="bare aiohttp client", reference_rounds=raw["bare_rps"],
               compare="ratio"),
        figure("replay", "eval compare CPU per request", raw["eval_cpu_ms"], "ms",
               reference="bare aiohttp client", reference_rounds=raw["bare_cpu_ms"],
               compare="ratio"),
        figure("replay", "eval compare requests/s per client core", capacity, "req/s",
               target=f">= {TARGET_CAPACITY_RPS:.0f} req/s", op=">=",
               limit=TARGET_CAPACITY_RPS),
    ]
    return figures, {"rounds": raw, "verdicts": verdicts, "requests": n,
                     "concurrency": concurrency, "tokens": tokens}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="1 round of 40 requests")
    parser.add_argument("--json-out", metavar="FILE")
    args = parser.parse_args()
    rounds, n = (1, 40) if args.smoke else (args.rounds, args.requests)
    figures, raw = run(rounds, n, args.concurrency, args.tokens)
    print(render_table(figures))
    print(f"{n} requests x {rounds} rounds, concurrency {args.concurrency}, "
          f"{args.tokens} tokens each; eval verdicts {raw['verdicts']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"figures": [f.to_json() for f in figures], **raw}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
