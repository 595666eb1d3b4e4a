"""Running the simulator: as the foreground process, or in-process on a free port."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from proxy.eventloop import run_fast
from proxy.sim.app import make_sim_app
from proxy.sim.config import SimConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunningSim:
    """A simulator started with `start_sim`; `stop()` it when done."""

    runner: web.AppRunner
    url: str  # http://host:port, no trailing slash

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_sim(config: SimConfig) -> RunningSim:
    """Start a simulator on the running loop (port 0 picks a free port)."""
    runner = web.AppRunner(make_sim_app(config), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    port = runner.addresses[0][1] if runner.addresses else config.port
    return RunningSim(runner=runner, url=f"http://{config.host}:{port}")


async def _serve_until_signal(config: SimConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sim = await start_sim(config)
    # One parseable line on stdout: scripts wait for it and read the port from it.
    print(f"vllm-cutover sim listening on {sim.url} (model {config.model_name})", flush=True)
    try:
        await stop.wait()
    finally:
        await sim.stop()


def serve(config: SimConfig) -> int:
    try:
        run_fast(_serve_until_signal(config))
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, exc)
        return 1
    return 0
