"""The cutover benchmark's clients, each kind in its own process so that neither's event
loop delays the other's timing (nor the orchestrator's polling):

    python bench/_cutover_load.py --url URL --model M --role steady --clients 32 --out F
    python bench/_cutover_load.py --url URL --model M --role probe --interval-ms 10 --out F

`steady`: proxy/demo/steady.py's SteadyLoad (chat and completions, three in four streamed,
every answer checked in full). `probe`: one-token unstreamed completions sent at a fixed
interval, whose `system_fingerprint` says which backend answered. Both run until SIGTERM; each
client then finishes the request it has under way, and every outcome goes to --out as
JSON. Times are `time.perf_counter()`: CLOCK_MONOTONIC on Linux, one clock for every
process of the machine, so the orchestrator's marks and these outcomes line up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from proxy.demo.steady import Outcome, SteadyLoad

Role = Literal["steady", "probe"]
PROBE_TOKENS = 1


async def _probe(load: SteadyLoad, stop: asyncio.Event, interval_s: float) -> None:
    """One probe every `interval_s`, whatever the answers take (open loop): the moment
    the routing changed is then known to within `interval_s`. Closed loops bunch up."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=load.timeout_s)
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[Outcome]] = set()

    def done(task: asyncio.Task[Outcome]) -> None:
        pending.discard(task)
        load.result.outcomes.append(task.result())

    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=256)) as session:
        due = loop.time()
        while not stop.is_set():
            task = loop.create_task(load.one(session, "completions", False))
            pending.add(task)
            task.add_done_callback(done)
            due += interval_s
            await asyncio.sleep(max(0.0, due - loop.time()))
        await asyncio.gather(*pending)


async def _run(args: argparse.Namespace) -> list[Outcome]:
    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(sig, stop.set)
    tokens = PROBE_TOKENS if args.role == "probe" else args.max_tokens
    load = SteadyLoad(args.url, args.model, clients=args.clients, max_tokens=tokens)
    if args.role == "probe":
        await _probe(load, stop, args.interval_ms / 1000)
    else:
        await load.run(stop)
    return load.result.outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the cutover benchmark's client load")
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--role", choices=("steady", "probe"), required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between probes")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    outcomes = asyncio.run(_run(args))
    args.out.write_text(json.dumps([asdict(o) for o in outcomes]))
    return 0


class LoadProcess:
    """One client process (`role`) against `url`, from `start()` to `stop()`, which
    returns its outcomes."""

    def __init__(self, role: Role, url: str, model: str, work_dir: Path, *, clients: int = 1,
                 max_tokens: int = 1, interval_ms: float = 10.0) -> None:
        self.role = role
        self.out = work_dir / f"{role}-outcomes.json"
        self.log = work_dir / f"{role}-load.log"
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--url", url, "--model",
                     model, "--role", role, "--clients", str(clients), "--max-tokens",
                     str(max_tokens), "--interval-ms", f"{interval_ms:g}", "--out",
                     str(self.out)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 120.0) -> list[Outcome]:
        assert self.proc is not None, "start() first"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.returncode != 0 or not self.out.exists():
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the {self.role} load exited with {self.proc.returncode} "
                               f"and no outcomes:\n{tail}")
        rows: list[dict[str, Any]] = json.loads(self.out.read_text())
        return [Outcome(**row) for row in rows]


if __name__ == "__main__":
    sys.exit(main())
