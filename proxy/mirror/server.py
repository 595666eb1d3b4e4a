"""Running the proxy: both listeners, signals that set a flag, graceful shutdown.

SIGTERM/SIGINT only set an event; shutdown then stops accepting, lets requests in
flight finish (up to the drain timeout, aiohttp's `shutdown_timeout`), drains the
background tasks (cleanup_ctx) and closes pools and the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from proxy.eventloop import run_fast
from proxy.mirror.admin.api import build_admin_app
from proxy.mirror.app import METRICS_KEY, ROUTER_KEY, build_app
from proxy.mirror.collector import pace_garbage_collection
from proxy.mirror.config import ProxyConfig
from proxy.mirror.listener import HEAD_LIMITS, ClientGuard, GuardedSite
from proxy.tasks import cancel_all, start_task

log = logging.getLogger(__name__)


async def _start(app: web.Application, host: str, port: int,
                 config: ProxyConfig) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=config.drain_timeout_s)
    await runner.setup()
    # The keep-alive timer is armed when a connection opens and after each answer, and
    # closes it only while no request head is complete: a header timeout (listener.py).
    site = GuardedSite(runner, host, port, backlog=4096,
                       guard=ClientGuard(config.max_idle_per_client,
                                         app[METRICS_KEY].idle_closed.inc),
                       keepalive_timeout=config.header_timeout_s, access_log=None,
                       **HEAD_LIMITS)
    await site.start()
    return runner, site.bound_port


async def serve(config: ProxyConfig, stop: asyncio.Event | None = None,
                on_ready: Callable[[int, int | None], None] | None = None) -> None:
    """Serve until `stop` is set (or SIGTERM/SIGINT), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    app = build_app(config)
    runner, port = await _start(app, config.host, config.port, config)
    # Everything made so far lives as long as the process: out of the collector's sight,
    # so full collections under traffic only walk what requests create (shorter pauses).
    gc.collect()
    gc.freeze()
    collector = start_task(pace_garbage_collection(), "gc-pacer")
    admin_runner: web.AppRunner | None = None
    admin_port: int | None = None
    try:
        if config.admin.port is not None:
            admin_runner, admin_port = await _start(
                build_admin_app(app), config.admin.host, config.admin.port,
                dataclasses.replace(config, drain_timeout_s=5.0))
        urls = app[ROUTER_KEY].routes.urls()
        log.info("proxy on %s:%d -> primary %s, shadow %s, baseline %s; admin on %s",
                 config.host, port, urls["primary"], urls["shadow"], urls["baseline"],
                 f"{config.admin.host}:{admin_port}" if admin_port is not None else "off")
        if on_ready is not None:
            on_ready(port, admin_port)
        await stop.wait()
        log.info("shutting down: draining requests (up to %.0fs)", config.drain_timeout_s)
    finally:
        if admin_runner is not None:
            await admin_runner.cleanup()
        await runner.cleanup()
        await cancel_all([collector])
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass


def run(config: ProxyConfig) -> None:
    """Blocking entry point for the CLI (uvloop when installed)."""
    run_fast(serve(config))
