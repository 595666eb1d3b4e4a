"""The demo's story on the Docker engine (`bash scripts/dev.sh demo-docker`): an old
simulated vLLM container, the proxy in front of it with `--driver docker`, steady client
traffic, and `vllm-cutover cutover start --old CONTAINER --new-image IMAGE`: the new
container made from the old one's configuration, warmed, shadowed, judged, promoted with
the old one as its shadow, the old one drained and stopped (kept for a rollback).

Builds the simulated engine's image on a local base image the first time (as the tests
do: no registry is needed), and removes every container and network it made at the end.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _cutover_stack import NEW_VERSION, Pacing, Stack, cutover_stack, sim_image

from proxy.demo.steady import SteadyLoad
from proxy.demo.story import watch

CLIENTS = 16


async def story(stack: Stack, pacing: Pacing) -> int:
    print(f"== old container {stack.old_name} at {stack.old_url}; proxy {stack.proxy.url} "
          f"(admin {stack.proxy.admin_url}, --driver docker)")
    stop = asyncio.Event()
    load = SteadyLoad(stack.proxy.url, pacing.model, clients=CLIENTS, max_tokens=24)
    traffic = asyncio.create_task(load.run(stop))
    body = {"old": stack.old_name, "new_image": stack.new_image,
            "new_command": pacing.sim_args(NEW_VERSION), "min_samples": 100,
            "analysis_delay_s": 2.0, "post_promotion_s": 5.0, "scale_down_delay_s": 1.0,
            "shutdown_grace_s": 10.0}
    print(f"== {CLIENTS} clients streaming; $ vllm-cutover cutover start --old "
          f"{stack.old_name} --new-image {stack.new_image} --new-command '...--version "
          f"{NEW_VERSION}' --min-samples 100 --analysis-delay 2 --post-promotion 5 "
          "--scale-down-delay 1")
    try:
        await asyncio.to_thread(stack.admin.start, body)
        status = await watch(stack.admin, print, lambda phase: None)
    finally:
        stop.set()
        result = await traffic
    summary = result.summary()
    print(f"== clients: {summary['requests']} requests through the cutover, "
          f"{summary['failed']} failed or cut short {summary['errors'] or ''}")
    print(f"== cutover ended: {status.get('phase')}, verdict {status.get('verdict')}"
          + (f": {status['error'][:400]}" if status.get("error") else ""))
    return 0 if summary["failed"] == 0 and status.get("phase") in ("done", "aborted") else 1


def main() -> int:
    import docker

    client = docker.from_env(version="auto", timeout=600)
    work = Path(tempfile.mkdtemp(prefix="vllm-cutover-docker-demo-"))
    pacing = Pacing()
    print("== building (once) and tagging the simulated engine's image")
    images = sim_image(client, work, None)
    with cutover_stack(client, work, images, pacing) as stack:
        code = asyncio.run(story(stack, pacing))
    print(f"== removed the demo's containers and network; proxy logs and records: {work}")
    return code


if __name__ == "__main__":
    sys.exit(main())
