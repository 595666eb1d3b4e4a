"""The cutover benchmark's stack on the real Docker engine, as the end-to-end tests run it
(tests/e2e/cutover_harness.py): the sim image under the bench's own tags, a network, the
old container on it, and `vllm-cutover proxy --driver docker` as a process in front of it;
the cutover is driven through the proxy's admin API with each command's time marked.

Old and new run one image; the new container is given another `--version`
(`--new-command`), so an unstreamed answer's `system_fingerprint` says which one answered.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cutover_figures import Switch

from proxy.cutover.driver import LABEL_REPLACES
from proxy.cutover.shell.client import CutoverClient
from tests.e2e.cutover_harness import CutoverProxy
from tests.e2e.images import DEFAULT_BASE_IMAGE, ImageBuilder
from tests.e2e.proxy_fixtures import ADMIN_TOKEN
from tests.e2e.servers import http_ok

TAG_PREFIX = "vllm-cutover-bench"
OLD_VERSION = "0.32.0-sim"
NEW_VERSION = "0.33.0-sim"


@dataclass(frozen=True)
class Pacing:
    """What the simulated engines serve and how fast."""

    model: str = "tiny-sim"
    ttft_ms: float = 40.0
    itl_ms: float = 15.0

    def sim_args(self, version: str) -> list[str]:
        return ["--host", "0.0.0.0", "--port", "8000", "--model-name", self.model,
                "--ttft-ms", f"{self.ttft_ms:g}", "--itl-ms", f"{self.itl_ms:g}",
                "--version", version]


def fingerprint(version: str) -> str:
    """What the sim puts in an unstreamed answer's `system_fingerprint`."""
    return f"vllm-{version}"


def sim_image(client: Any, work_dir: Path, given: str | None) -> tuple[str, str]:
    """(old, new) tags of the sim image: `given`, or built from this checkout."""
    import docker.errors

    if given is None:
        builder = ImageBuilder(client, work_dir, tag_prefix=TAG_PREFIX)
        try:
            client.images.get(builder.base_image)
        except docker.errors.ImageNotFound:
            raise SystemExit(f"base image {builder.base_image!r} is missing: build it (see "
                             f"scripts/dev.sh setup-e2e; default {DEFAULT_BASE_IMAGE!r}) or "
                             "give --sim-image") from None
        given = builder.sim()
        builder.discard_wheels()  # the work dir keeps the records and logs, not ~70 MB of wheels
    image = client.images.get(given)
    for tag in ("old", "new"):
        image.tag(f"{TAG_PREFIX}/sim", tag)
    return f"{TAG_PREFIX}/sim:old", f"{TAG_PREFIX}/sim:new"


@dataclass
class Stack:
    """The proxy in front of the old container, and the cutover commands, timed."""

    proxy: CutoverProxy
    old_name: str
    old_url: str
    new_image: str
    pacing: Pacing

    @property
    def admin(self) -> CutoverClient:
        return CutoverClient(self.proxy.admin_url, ADMIN_TOKEN)

    def start(self, **spec: Any) -> dict[str, Any]:
        """A cutover that waits for `promote`; the status once it is shadowing. The gate
        never acts: on a loaded machine its latency checks fail now and then (TTFT p99
        x1.34 seen), and an automatic abort or rollback is not what is measured."""
        body = {"old": self.old_name, "new_image": self.new_image,
                "new_command": self.pacing.sim_args(NEW_VERSION), "auto_promote": False,
                "min_samples": 10**9, "failure_limit": 10**9, "analysis_timeout_s": 3600.0,
                "scale_down_delay_s": 0.0, "shutdown_grace_s": 10.0, **spec}
        self.admin.start(body)
        return self.proxy.wait_phase(["shadowing"], 300)

    def command(self, name: str, phase: str, body: dict[str, Any] | None = None) -> Switch:
        """Send `name`; its marks once the status history holds `phase` (what it caused)."""
        sent = time.perf_counter()
        self.admin.command(name, body)
        acked = time.perf_counter()
        status = self.proxy.wait_phase([phase, *_AFTER[phase]], 120)
        offset = time.time() - time.perf_counter()  # unix -> perf_counter, both read now
        at = [t["at_unix"] for t in status["history"] if t["to"] == phase]
        return Switch(sent, acked, at[-1] - offset if at else None)

    def rollback(self) -> Switch:
        """Roll back; the marks once the old one serves alone again (`rolled_back`)."""
        switch = self.command("rollback", "rolling_back")
        status = self.proxy.wait_phase(["rolled_back"], 300)
        return Switch(switch.sent_s, switch.acked_s, switch.recorded_s, status["rollback_s"])


# The phases the status may already have moved on to when it is first polled.
_AFTER = {"promoting": ("post_promotion", "draining_old", "done"),
          "rolling_back": ("rolled_back",)}


@contextlib.contextmanager
def cutover_stack(client: Any, work_dir: Path, images: tuple[str, str],
                  pacing: Pacing) -> Iterator[Stack]:
    """The old container and the proxy; everything the run made is removed at the end."""
    tag = uuid.uuid4().hex[:8]
    network = client.networks.create(f"cutover-bench-{tag}")
    old = None
    proxy: CutoverProxy | None = None
    try:
        old = client.containers.run(
            images[0], pacing.sim_args(OLD_VERSION), detach=True, name=f"vllm-old-bench-{tag}",
            network=network.name, labels={"app": f"vllm-bench-{tag}"})
        old.reload()
        url = f"http://{old.attrs['NetworkSettings']['Networks'][network.name]['IPAddress']}:8000"
        deadline = time.monotonic() + 120
        while not http_ok(url + "/health"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the old container never answered /health: "
                                   f"{old.logs(tail=40).decode(errors='replace')}")
            time.sleep(0.3)
        proxy = CutoverProxy(work_dir, url)
        proxy.start()
        yield Stack(proxy, old.name, url, images[1], pacing)
    finally:
        if proxy is not None:
            proxy.stop()
        if old is not None:
            for container in client.containers.list(all=True,
                                                    filters={"label": LABEL_REPLACES}):
                if container.labels.get(LABEL_REPLACES) == old.name:
                    container.remove(force=True)
            old.remove(force=True)
        network.remove()
