"""The demo's story on the Docker engine (`bash scripts/dev.sh demo-docker`): an old
simulated vLLM container, the proxy in front of it with `--driver docker`, steady client
traffic, and `vllm-cutover cutover start --old CONTAINER --new-image IMAGE`: the new
container made from the old one's configuration, warmed, shadowed, judged, promoted with
the old one as its shadow, the old one drained and stopped (kept for a rollback); last the
report over the cutover's evidence.

Builds the simulated engine's image on a local base image the first time (as the tests
do: no registry is needed), and removes every container and network it made at the end,
also when interrupted (SIGINT or SIGTERM: the first one ends the story and cleans up,
further ones are ignored until the cleanup is done).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _cutover_stack import NEW_VERSION, Pacing, Stack, cutover_stack, sim_image

from proxy.cli.gate_args import add_gate_arguments, gate_criteria
from proxy.cutover.driver import LABEL_REPLACES
from proxy.demo.run import show_report
from proxy.demo.steady import SteadyLoad
from proxy.demo.story import watch
from proxy.gate.verdict import GateCriteria
from proxy.terminal import StatusLine

CLIENTS = 16
MAX_TOKENS = 8  # short answers: more of them in the gate's window


def _described(role: str, container: Any) -> str:
    config = container.attrs["Config"]
    networks = ", ".join(container.attrs["NetworkSettings"]["Networks"])
    return (f"  {role} {container.name}: image {config['Image']}, network {networks}, "
            f"command {' '.join(config['Cmd'] or [])}")


def new_container_lines(client: Any, old_name: str) -> list[str]:
    """The old container beside the new one the proxy made from its configuration."""
    made = client.containers.list(all=True, filters={"label": f"{LABEL_REPLACES}={old_name}"})
    return [_described("old", client.containers.get(old_name)),
            *(_described("new", container) for container in made)]


async def story(client: Any, stack: Stack, pacing: Pacing, out: StatusLine) -> dict[str, Any]:
    """The cutover under steady load; its final status and what the clients saw."""
    out.say(f"== old container {stack.old_name} at {stack.old_url}; proxy {stack.proxy.url} "
            f"(admin {stack.proxy.admin_url}, --driver docker)")
    stop = asyncio.Event()
    load = SteadyLoad(stack.proxy.url, pacing.model, clients=CLIENTS, max_tokens=MAX_TOKENS)
    traffic = asyncio.create_task(load.run(stop))
    body = {"old": stack.old_name, "new_image": stack.new_image,
            "new_command": pacing.sim_args(NEW_VERSION), "min_samples": 100,
            "analysis_delay_s": 2.0, "post_promotion_s": 5.0, "scale_down_delay_s": 1.0,
            "shutdown_grace_s": 10.0}
    out.say(f"== {CLIENTS} clients streaming; $ vllm-cutover cutover start --old "
            f"{stack.old_name} --new-image {stack.new_image} --new-command '...--version "
            f"{NEW_VERSION}' --min-samples 100 --analysis-delay 2 --post-promotion 5 "
            "--scale-down-delay 1")
    shown_new = False

    def on_phase(phase: str) -> None:
        nonlocal shown_new
        if phase in ("shadowing", "aborted", "failed") and not shown_new:
            shown_new = True
            for line in new_container_lines(client, stack.old_name):
                out.say(line)

    try:
        await asyncio.to_thread(stack.admin.start, body)
        status = await watch(stack.admin, out, on_phase)
    finally:
        stop.set()
        result = await traffic
    return {"status": status, "traffic": result.summary()}


def proxy_criteria(gate_flags: list[str]) -> GateCriteria:
    """The criteria the proxy's gate flags ask for (the harness leaves the p99 ratios
    unjudged: on two shared cores identical engines' tails swing past the limits), so the
    report judges as the live gate did."""
    parser = argparse.ArgumentParser()
    add_gate_arguments(parser, "gate")
    return gate_criteria(parser.parse_args(gate_flags))


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived: end the story, clean up, exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Signals:
    """The first SIGINT / SIGTERM ends the story (raises Interrupted) unless the cleanup
    has begun; any signal after that waits for the cleanup to finish."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.held = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def hold(self) -> None:
        """From now on the cleanup runs to its end whatever arrives."""
        self.held = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            if not self.held:
                raise Interrupted(signum)
        print(f"== {signal.Signals(signum).name}: removing the demo's containers and network, "
              "one moment", flush=True)


def main() -> int:
    import docker

    signals = Signals()
    started = time.monotonic()
    out = StatusLine(sys.stdout)
    client = docker.from_env(version="auto", timeout=600)
    work = Path(tempfile.mkdtemp(prefix="vllm-cutover-docker-demo-"))
    pacing = Pacing()
    try:
        out.say("== building the simulated engine's image from this checkout (its wheels, "
                "then docker build on cached layers)")
        images = sim_image(client, work, None)
        with cutover_stack(client, work, images, pacing) as stack:
            gate_flags = list(stack.proxy.gate_args)
            try:
                outcome = asyncio.run(story(client, stack, pacing, out))
            finally:
                signals.hold()
    except Interrupted as exc:
        out.close()
        print(f"== {exc}: removed the demo's containers and network; logs: {work}")
        return 128 + exc.signum
    if signals.received is not None:  # arrived during the cleanup, which went on
        print(f"== {signal.Signals(signals.received).name}: removed the demo's containers "
              f"and network; logs: {work}")
        return 128 + signals.received
    out.say("== removed the demo's containers and network")
    status, traffic = outcome["status"], outcome["traffic"]
    phase = status.get("phase")
    out.say(f"== clients: {traffic['requests']} requests through the cutover "
            f"({traffic['streams']} streamed), {traffic['failed']} failed or cut short "
            f"{traffic['errors'] or ''}")
    out.say(f"== cutover ended: {phase}, verdict {status.get('verdict')}"
            + (f": {status['error'][:400]}" if status.get("error") else ""))
    out.say("\n== Report over the cutover's evidence")
    db_path = str(work / "records.sqlite")
    verdict = show_report(db_path, str(work / "report.html"), "vllm-cutover Docker demo",
                          out.say, proxy_criteria(gate_flags), gate_flags)
    out.say(f"Records and proxy logs: {work}")
    out.say(f"Docker demo finished in {time.monotonic() - started:.1f} s; cutover {phase}, "
            f"verdict {verdict}, {traffic['requests']} client requests, "
            f"{traffic['failed']} failed.")
    return 0 if traffic["failed"] == 0 and phase in ("done", "aborted") else 1


if __name__ == "__main__":
    sys.exit(main())
