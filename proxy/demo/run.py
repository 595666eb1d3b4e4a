"""`vllm-cutover demo`: the whole story on one machine, no GPU, in well under a minute.

1. the launcher's dry run on the upgrade guide's example command;
2. three simulated vLLMs: old (serving), new (healthy, or with a slower first token
   and a few diverging prompts), baseline (a second old with its own noise);
3. the proxy in front of the old one alone; a check that clients get exactly what
   the old server answers directly;
4. the cutover under steady client traffic: the new one shadowed, judged against
   old-vs-old noise, promoted with one routing change (the old one then shadows it),
   drained; or aborted when the gate fails. Every client answer is checked in full;
5. the report over the cutover's evidence, labelled old and new (text + offline HTML).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
from proxy.demo.story import TOKEN, run_cutover
from proxy.demo.traffic import DemoRequest, answer_text, demo_requests, fetch
from proxy.mirror.config import default_state_file
from proxy.terminal import StatusLine

if TYPE_CHECKING:
    from proxy.gate.verdict import GateCriteria

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
# The proxy's longest orderly stop at its default --drain-timeout of 30 s: requests 30 s,
# the capture worker's records 30 + 10 s, the proxy's own tasks 30 s, the worker's exit 10 s.
PROXY_STOP_WAIT_S = 150.0


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of the demo (the CLI builds it)."""

    scenario: Scenario = "healthy"
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
        "10",
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
        "old": _sim_args("0.31.0-sim", 40, 0.0, 1),
        "new": _sim_args("0.32.0-sim", 160 if regression else 40, 0.08 if regression else 0.02, 2),
        "baseline": _sim_args("0.31.0-sim", 40, 0.02, 3),
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


async def _drive(
    config: DemoConfig, proxy: Child, backends: dict[str, Child], admin_url: str,
    out: StatusLine
) -> dict[str, Any]:
    say = out.say
    await wait_http(proxy, admin_url + "/admin/routes")
    requests = demo_requests(config.requests, MODEL, config.seed)
    checks = [r for r in requests if r.deterministic][:DIRECT_CHECKS]
    same = await _direct_matches(proxy.url, backends["old"].url, checks)
    say(f"  responses through the proxy identical to the old server's direct answers: "
        f"{same}/{len(checks)}")
    say(f"\n== 4. The cutover, under {config.concurrency} clients streaming all along "
        f"(and {len(requests)} mixed requests while the new one is shadowed)")
    status, traffic = await run_cutover(proxy.url, admin_url, MODEL, backends["new"].url,
                                        backends["baseline"].url, requests,
                                        config.concurrency, out)
    summary = traffic.summary()
    say(f"  clients: {summary['requests']} requests through the cutover ({summary['streams']} "
        f"streamed), {summary['failed']} failed or cut short {summary['errors'] or ''}")
    return {"status": status, "traffic": summary, "direct_same": same,
            "direct_checked": len(checks)}


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
    old = children[0]
    port, admin_port = free_port(), free_port()
    argv = ["--primary", old.url, "--db", db_path, "--admin-token", TOKEN]
    children.append(start_proxy(argv, port, admin_port, log_dir / "proxy.log"))
    lines += [
        "\n== 3. The proxy in front of the old version alone (no shadow before a cutover)",
        f"  vllm-cutover proxy --port {port} --admin-port {admin_port} {' '.join(argv)}",
    ]
    return lines


def _show_outcome(outcome: dict[str, Any], say: Callable[[str], None]) -> str:
    """The cutover's end, and what it means; the phase it ended in."""
    status = outcome["status"]
    phase = status.get("phase")
    say(f"\n  cutover ended: {phase}  verdict: {status.get('verdict')}  "
        f"samples: {status.get('samples')}")
    if phase == "done":
        say("  the new version serves every client; the old one was drained and is kept "
            "stopped as the way back (vllm-cutover cutover rollback)")
    elif status.get("error"):
        say(f"  {status['error'][:600]}")
        say("  the old version kept serving every client all along")
    return str(phase)


def run_demo(config: DemoConfig, out: StatusLine | None = None) -> int:
    """The whole story on `out` (stdout: its progress in place on a terminal)."""
    out = out or StatusLine(sys.stdout)
    say = out.say
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
        backends = {child.name: child for child in children}
        outcome = asyncio.run(_drive(config, proxy, backends, admin_url, out))
        phase = _show_outcome(outcome, say)
        # The report reads the records the capture worker writes as the proxy drains (up
        # to its drain timeout for requests, again for the worker, again for its tasks):
        # wait that long, not less, or the report judges a prefix of them.
        if proxy.stop(timeout_s=PROXY_STOP_WAIT_S) == -signal.SIGKILL:
            say(f"  the proxy did not stop within {PROXY_STOP_WAIT_S:.0f} s and was killed: "
                "records its capture worker had not written are missing from the report")
    except DemoError as exc:
        say(f"demo failed: {exc}")
        return 1
    finally:
        if launcher is not None and launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for child in reversed(children):
            child.stop()
    say("\n== 5. Report over the cutover's evidence")
    verdict = show_report(db_path, html_path, f"vllm-cutover demo ({config.scenario})", say)
    say(f"Records:     {db_path}")
    say(f"Logs:        {log_dir}")
    failed = outcome["traffic"]["failed"]
    say(f"Demo finished in {time.monotonic() - started:.1f} s; cutover {phase}, verdict "
        f"{verdict}, {failed} client request(s) failed.")
    return 0 if failed == 0 and phase in ("done", "aborted") else 1


def show_report(db_path: str, html_path: str, title: str, say: Callable[[str], None],
                criteria: GateCriteria | None = None, gate_flags: Sequence[str] = ()) -> str:
    """The report over the cutover's evidence (its window from the state file beside the
    records), as text on `say` and as HTML in `html_path`; its verdict. `criteria` (default
    the defaults) are what `gate_flags` of `vllm-cutover report` ask for."""
    from proxy.report.build import report_from_db
    from proxy.report.html import render_html
    from proxy.report.load import window_from_state
    from proxy.report.text import render_text

    state_file = default_state_file(db_path)
    window = window_from_state(state_file) if state_file else None
    report = report_from_db(db_path, criteria, window=window)
    say(" ".join(["$ vllm-cutover report --db", db_path, "--state-file", str(state_file),
                  *gate_flags]))
    say(render_text(report))
    with open(html_path, "w", encoding="utf-8") as page:
        page.write(render_html(report, title=title))
    say(f"HTML report: {html_path}")
    return str(report.gate.verdict)
