"""Real vLLM CPU servers for end-to-end suites, started once per session and shared."""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.servers import ServerProcess, api_server_args, free_port, spawn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VllmSpec:
    """What to serve: the same spec twice in a session means the same server.

    `replica` tells apart servers that are otherwise identical (old and baseline both
    serve the same model under the same name, as the proxy needs)."""

    model_dir: Path
    name: str = "tiny"
    replica: int = 0
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class VllmServer:
    """A ready vLLM server on loopback."""

    spec: VllmSpec
    url: str
    port: int
    pid: int
    log_path: Path

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Trio:
    """Old A and old B serve the same weights (B: the identical twin, or the noise
    baseline); "different" serves perturbed weights under the same name."""

    old_a: VllmServer
    old_b: VllmServer
    different: VllmServer


# One tiny CPU engine holds about 2.3 GB (API server, engine core, worker). Five of them
# leave room on a 23 GB machine for the two engines a Docker cutover test runs in
# containers; eight at once (the tool-parser trio, then the eval suite's five) were
# OOM-killed in CI. `VLLM_CUTOVER_TEST_MAX_ENGINES` overrides the cap.
DEFAULT_MAX_ENGINES = 5


def _max_engines() -> int:
    raw = os.environ.get("VLLM_CUTOVER_TEST_MAX_ENGINES", "")
    return int(raw) if raw.strip() else DEFAULT_MAX_ENGINES


@dataclass
class VllmServerFactory:
    """Starts real vLLM CPU servers, shares them across the session, and keeps at most
    `max_engines` alive: asking for a spec not running stops the least recently asked
    for ones first. Suites ask again (module-scoped fixtures) rather than keep a server
    from an earlier module, so a stopped one is started again when it is wanted."""

    python: str
    log_dir: Path
    max_engines: int = field(default_factory=_max_engines)
    _running: OrderedDict[VllmSpec, tuple[ServerProcess, VllmServer]] = field(
        default_factory=OrderedDict)

    def start(
        self,
        model_dir: Path,
        name: str = "tiny",
        *,
        replica: int = 0,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> VllmServer:
        env_items = tuple(sorted((env or {}).items()))
        return self.start_many([VllmSpec(model_dir, name, replica, tuple(extra_args), env_items)])[0]

    def start_many(self, specs: Sequence[VllmSpec]) -> list[VllmServer]:
        """Spawn every spec not yet running, then wait for all: start-ups overlap."""
        wanted = list(dict.fromkeys(specs))
        if len(wanted) > self.max_engines:
            raise ValueError(f"{len(wanted)} engines asked for at once; the cap is "
                             f"{self.max_engines} (VLLM_CUTOVER_TEST_MAX_ENGINES)")
        self._forget_dead()
        for spec in wanted:
            if spec in self._running:
                self._running.move_to_end(spec)
        missing = [spec for spec in wanted if spec not in self._running]
        self._evict(keep=set(wanted), room=len(missing))
        fresh: list[tuple[VllmSpec, ServerProcess, int]] = []
        for spec in missing:
            port = free_port()
            argv = [self.python, *api_server_args(spec.model_dir, spec.name, port),
                    *spec.extra_args]
            log_path = self.log_dir / f"vllm-{spec.name}-{spec.replica}-{port}.log"
            proc = spawn(argv, port=port, log_path=log_path, env=dict(spec.env))
            fresh.append((spec, proc, port))
        try:
            for spec, proc, port in fresh:
                proc.wait_ready()
                logger.info("vLLM %r ready at %s (log %s)", spec.name, proc.url, proc.log_path)
        except BaseException:
            for _, proc, _ in fresh:
                proc.stop()
            raise
        for spec, proc, port in fresh:
            self._running[spec] = (proc, VllmServer(spec, proc.url, port, proc.pid, proc.log_path))
        return [self._running[spec][1] for spec in specs]

    def make_room(self, engines: int) -> None:
        """Stop the least recently used servers until `engines` more (in containers, or
        started by a launcher under test) fit under the cap."""
        self._forget_dead()
        self._evict(keep=set(), room=engines)

    def stop(self, server: VllmServer) -> None:
        """Stop one server early (a test that kills the shadow, say)."""
        proc, _ = self._running.pop(server.spec)
        proc.stop()

    def close(self) -> None:
        for proc, _ in self._running.values():
            proc.stop()
        self._running.clear()

    def _evict(self, keep: set[VllmSpec], room: int) -> None:
        for spec in list(self._running):
            if len(self._running) + room <= self.max_engines:
                return
            if spec not in keep:
                proc, server = self._running.pop(spec)
                logger.info("stopping vLLM %r at %s to stay under %d engines",
                            spec.name, server.url, self.max_engines)
                proc.stop()

    def _forget_dead(self) -> None:
        """A server whose process exited (killed, crashed) is started again when asked."""
        for spec, (proc, server) in list(self._running.items()):
            if proc.proc.poll() is not None:
                logger.warning("vLLM %r at %s exited (%s); log %s", spec.name, server.url,
                               proc.proc.returncode, server.log_path)
                proc.stop()
                del self._running[spec]
