"""`vllm-cutover demo`: the whole story on one machine, no GPU, in well under a minute.

1. the launcher's dry run on the upgrade guide's example command;
2. three simulated vLLMs: old (primary), new (shadow: slower first token and a
   few diverging prompts, or healthy), baseline (a second old with its own noise);
3. the proxy in front of them, mixed client traffic through it, a check that
   clients get exactly what the old server answers directly;
4. the live gate from the admin API, then the report (text + offline HTML).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from proxy.demo.processes import (
    Child,
    DemoError,
    child_env,
    free_port,
    sim_ready,
    spawn_sim,
    start_proxy,
    wait_http,
)
from proxy.demo.traffic import DemoRequest, answer_text, demo_requests, fetch, send_all
from proxy.mirror.config import default_state_file

Scenario = Literal["regression", "healthy"]
MODEL = "demo/Llama-3.1-8B-Instruct-FP4"
LAUNCH_EXAMPLE = (
    "launch",
    "--dry-run",
    "--vllm-version",
    "0.32.0",
    "--compute-capability",
    "10.0",
    "--",
    "vllm",
    "serve",
    "nvidia/Llama-3.1-8B-Instruct-FP4",
    "--quantization",
    "nvfp4",
    "--fp4-gemm-backend",
    "cutlass",
)
DIRECT_CHECKS = 12


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of the demo (the CLI builds it)."""

    scenario: Scenario = "regression"
    requests: int = 180
    concurrency: int = 8
    out_dir: str | None = None
    launcher: bool = True
    seed: int = 0
    settle_timeout_s: float = 20.0

    def __post_init__(self) -> None:
        if not 1 <= self.requests <= 5000:
            raise ValueError(f"requests must be within 1..5000, got {self.requests!r}")
        if not 1 <= self.concurrency <= 256:
            raise ValueError(f"concurrency must be within 1..256, got {self.concurrency!r}")


def _sim_args(version: str, ttft_ms: int, divergence_rate: float, seed: int) -> list[str]:
    common = [
        "--model-name",
        MODEL,
        "--itl-ms",
        "3",
        "--jitter",
        "0.2",
        "--natural-tokens",
        "12:60",
    ]
    return [
        *common,
        *("--version", version, "--ttft-ms", str(ttft_ms)),
        *("--divergence-rate", str(divergence_rate), "--seed", str(seed)),
    ]


def sim_knobs(config: DemoConfig) -> dict[str, list[str]]:
    """Command-line knobs of the three simulated backends.

    Old and baseline share a version and speed; the baseline's own small divergence
    rate stands for the run-to-run noise real vLLM shows even on one version.
    """
    regression = config.scenario == "regression"
    return {
        "old": _sim_args("0.31.0-sim", 15, 0.0, 1),
        "new": _sim_args("0.32.0-sim", 60 if regression else 15, 0.08 if regression else 0.02, 2),
        "baseline": _sim_args("0.31.0-sim", 15, 0.02, 3),
    }


def start_launcher_dry_run() -> subprocess.Popen[str]:
    """Start the launcher's dry run now (it checks the GPU stack: seconds); read it later."""
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *LAUNCH_EXAMPLE],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(),
    )


def launcher_output(process: subprocess.Popen[str], timeout_s: float = 90.0) -> str:
    try:
        out, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return f"$ vllm-cutover {' '.join(LAUNCH_EXAMPLE)}\n{out.rstrip()}\n(exit {process.returncode})"


async def _get_json(url: str) -> tuple[int, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
        return resp.status, await resp.json(content_type=None)


async def _direct_matches(proxy_url: str, old_url: str, requests: list[DemoRequest]) -> int:
    """How many deterministic answers are identical through the proxy and direct."""
    import aiohttp

    same = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for request in requests:
            stream = bool(request.body.get("stream"))
            texts = []
            for base in (proxy_url, old_url):
                status, raw, _ = await fetch(session, base, request)
                texts.append(answer_text(request.path, raw, stream) if status == 200 else None)
            same += texts[0] is not None and texts[0] == texts[1]
    return same


async def _settle(admin_url: str, expected: int, timeout_s: float) -> dict[str, Any]:
    """Wait until the proxy has recorded `expected` exchanges and nothing is in flight."""
    deadline = time.monotonic() + timeout_s
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        _, stats = await _get_json(admin_url + "/admin/stats")
        inflight = (stats.get("live") or {}).get("shadow_inflight", 0)
        if stats.get("records", 0) >= expected and not inflight:
            break
        await asyncio.sleep(0.2)
    return stats


async def _drive(
    config: DemoConfig, proxy: Child, old: Child, admin_url: str, say: Callable[[str], None]
) -> dict[str, Any]:
    await wait_http(proxy, admin_url + "/admin/routes")
    requests = demo_requests(config.requests, MODEL, config.seed)
    say(
        f"sending {len(requests)} requests ({config.concurrency} concurrent): chat and "
        "completions, streamed and not, 2/3 deterministic (temperature 0 or seeded)"
    )
    traffic = await send_all(proxy.url, requests, config.concurrency)
    ttft = sorted(traffic.ttft_s)
    p50 = ttft[len(ttft) // 2] * 1000 if ttft else float("nan")
    say(
        f"  {traffic.sent} sent in {traffic.elapsed_s:.1f} s, statuses {dict(traffic.statuses)}, "
        f"client failures {dict(traffic.failures) or 'none'}, client TTFT p50 {p50:.1f} ms"
    )
    checks = [r for r in requests if r.deterministic][:DIRECT_CHECKS]
    same = await _direct_matches(proxy.url, old.url, checks)
    say(
        f"  responses through the proxy identical to the old server's direct answers: "
        f"{same}/{len(checks)}"
    )
    expected = traffic.statuses.get(200, 0) + len(checks)
    stats = await _settle(admin_url, expected, config.settle_timeout_s)
    say(
        f"  proxy recorded {stats.get('records', '?')} mirrored exchanges "
        f"(expected {expected}); shadow in flight {stats.get('live', {}).get('shadow_inflight')}"
    )
    status, gate = await _get_json(admin_url + "/admin/gate")
    return {"status": status, "gate": gate, "direct_same": same, "direct_checked": len(checks)}


def _start_backends(config: DemoConfig, db_path: str, log_dir: Path,
                    children: list[Child]) -> list[str]:
    """Start old, new, baseline and the proxy (appended to `children`); lines to print."""
    knobs = sim_knobs(config)
    logs = {name: log_dir / f"sim-{name}.log" for name in knobs}
    spawned = {name: spawn_sim(args, logs[name]) for name, args in knobs.items()}
    lines = [f"\n== 2. Simulated backends (scenario: {config.scenario})"]
    for name, process in spawned.items():
        children.append(sim_ready(name, process, logs[name]))
        lines.append(f"  {name:<8} {children[-1].url}  vllm-cutover sim {' '.join(knobs[name])}")
    old, new, baseline = children
    port, admin_port = free_port(), free_port()
    routes = ["--primary", old.url, "--shadow", new.url, "--baseline", baseline.url]
    children.append(start_proxy([*routes, "--db", db_path], port, admin_port,
                                log_dir / "proxy.log"))
    lines += [
        "\n== 3. The mirroring proxy and client traffic",
        (
            f"  vllm-cutover proxy --port {port} --admin-port {admin_port} {' '.join(routes)}"
            f" --db {db_path}"
        ),
    ]
    return lines


def _show_gate(admin_url: str, outcome: dict[str, Any], say: Callable[[str], None]) -> None:
    gate = outcome["gate"]
    say(f"\n== 4. Live gate: GET {admin_url}/admin/gate -> HTTP {outcome['status']}")
    say(
        f"  verdict: {gate.get('verdict')}  samples: {gate.get('samples')}  "
        f"compared: {gate.get('compared')}  diverged: {gate.get('diverged')}  "
        f"baseline: {json.dumps(gate.get('baseline'))}"
    )
    say("\n".join(f"  - {reason}" for reason in gate.get("reasons", [])))


def run_demo(config: DemoConfig, say: Callable[[str], None] = print) -> int:
    from proxy.report.build import report_from_db
    from proxy.report.html import render_html
    from proxy.report.text import render_text

    started = time.monotonic()
    out_dir = config.out_dir or tempfile.mkdtemp(prefix="vllm-cutover-demo-")
    os.makedirs(out_dir, exist_ok=True)
    db_path, html_path = os.path.join(out_dir, "records.db"), os.path.join(out_dir, "report.html")
    log_dir = Path(out_dir) / "logs"
    for stale in (db_path, default_state_file(db_path)):  # a fresh story: no old routes
        if stale is not None and os.path.exists(stale):
            os.remove(stale)
    launcher = start_launcher_dry_run() if config.launcher else None
    children: list[Child] = []
    try:
        lines = _start_backends(config, db_path, log_dir, children)
        if launcher is not None:
            say("== 1. The launcher keeps the old launch command working (dry run)")
            say(launcher_output(launcher))
        say("\n".join(lines))
        proxy = children[-1]
        admin_url = proxy.admin_url or ""
        outcome = asyncio.run(_drive(config, proxy, children[0], admin_url, say))
        _show_gate(admin_url, outcome, say)
        proxy.stop(timeout_s=30)
    except DemoError as exc:
        say(f"demo failed: {exc}")
        return 1
    finally:
        if launcher is not None and launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for child in reversed(children):
            child.stop()
    report = report_from_db(db_path)
    say(f"\n== 5. Report: vllm-cutover report --db {db_path}")
    say(render_text(report))
    with open(html_path, "w", encoding="utf-8") as out:
        out.write(render_html(report, title=f"vllm-cutover demo ({config.scenario})"))
    say(f"HTML report: {html_path}")
    say(f"Records:     {db_path}")
    say(f"Logs:        {log_dir}")
    say(f"Demo finished in {time.monotonic() - started:.1f} s; verdict {report.gate.verdict}.")
    return 0
