"""The demo's cutover: steady client traffic through the proxy while `vllm-cutover cutover`
shadows the new version, judges it, and promotes it (or aborts it), shown as it goes.

The cutover runs in the proxy (adopt mode: the new backend already runs, no container
driver); this module is the operator: it starts the cutover through the admin API, prints
each transition and the gate's progress, and counts what the clients saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from proxy.cutover.shell.client import AdminError, CutoverClient
from proxy.cutover.status import progress_line
from proxy.demo.steady import SteadyLoad, SteadyResult
from proxy.demo.traffic import DemoRequest, send_all
from proxy.tasks import start_task
from proxy.terminal import StatusLine

TOKEN = "demo-admin-token"
CUTOVER_TIMEOUT_S = 300.0


def start_request(new_url: str, baseline_url: str) -> dict[str, Any]:
    """The demo's cutover: short windows so the whole story takes seconds."""
    return {"new_url": new_url, "baseline_url": baseline_url, "min_samples": 60,
            "analysis_delay_s": 1.0, "analysis_timeout_s": 240.0, "failure_limit": 2,
            "post_promotion_s": 3.0, "scale_down_delay_s": 0.0}


def cli_line(admin_url: str, request: dict[str, Any]) -> str:
    """The `cutover start` command of `request`: each field's flag is its name with dashes,
    seconds without their `_s` (the rule of proxy/cli/cutover_cmd.py's start_request)."""
    args = " ".join(f"--{k.removesuffix('_s').replace('_', '-')} {v:g}" if isinstance(v, float)
                    else f"--{k.replace('_', '-')} {v}" for k, v in request.items())
    return f"vllm-cutover cutover start --admin-url {admin_url} {args}"


def _routes_line(status: dict[str, Any]) -> str:
    def side(name: str) -> str:
        value = status.get(name)
        return f"{value['version']} ({value['url']})" if value else "none"

    return f"routes: primary = {side('primary')}, shadow = {side('shadow')}"


async def watch(client: CutoverClient, out: StatusLine,
                on_phase: Callable[[str], None]) -> dict[str, Any]:
    """Print each transition (with the routes it left), and the gate's progress as the
    status line, until the end."""
    shown = 0
    deadline = time.monotonic() + CUTOVER_TIMEOUT_S
    while True:
        status = await asyncio.to_thread(client.status)
        for step in status["history"][shown:]:
            if step["from"] == "shadowing":
                out.close()  # the shadowing progress stays above its end
            out.say(f"  -> {step['to']:<15} {step['reason'][:150]}")
            on_phase(step["to"])
        if len(status["history"]) > shown:
            out.say(f"     {_routes_line(status)}")
            shown = len(status["history"])
        if status["phase"] == "shadowing":
            out.show(f"     {progress_line(status)}", key=status.get("verdict"))
        if (status.get("terminal") and not status.get("pending")) \
                or time.monotonic() > deadline:
            out.close()
            return status
        await asyncio.sleep(0.25)


async def run_cutover(proxy_url: str, admin_url: str, model: str, new_url: str,
                      baseline_url: str, mixed: list[DemoRequest], clients: int,
                      out: StatusLine) -> tuple[dict[str, Any], SteadyResult]:
    """The cutover under steady load (plus the mixed requests while shadowing)."""
    stop = asyncio.Event()
    # Short answers back to back: the anytime-valid gate needs about 1,000 requests a
    # side (errors within 1 %, a p99's bounds) before it can pass, within the 60 s window.
    steady = SteadyLoad(proxy_url, model, clients=clients, max_tokens=8)
    load = start_task(steady.run(stop), "demo-steady-load")
    mixed_task: asyncio.Task[Any] | None = None

    def on_phase(phase: str) -> None:
        nonlocal mixed_task
        if phase == "shadowing" and mixed_task is None:
            mixed_task = start_task(send_all(proxy_url, mixed, clients), "demo-mixed-traffic")

    client = CutoverClient(admin_url, TOKEN)
    request = start_request(new_url, baseline_url)
    out.say(f"  $ {cli_line(admin_url, request)}")
    try:
        await asyncio.to_thread(client.start, request)
        status = await watch(client, out, on_phase)
    except AdminError as exc:
        status = {"phase": None, "error": str(exc)}
    finally:
        if mixed_task is not None:
            await mixed_task
        stop.set()
        result = await load
    return status, result
