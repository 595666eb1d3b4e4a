"""Real vLLM CPU servers for end-to-end suites, started once per session and shared."""

from __future__ import annotations

import logging
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


@dataclass
class VllmServerFactory:
    """Starts real vLLM CPU servers once per session and stops them all at teardown."""

    python: str
    log_dir: Path
    _running: dict[VllmSpec, tuple[ServerProcess, VllmServer]] = field(default_factory=dict)

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
        fresh: list[tuple[VllmSpec, ServerProcess, int]] = []
        for spec in dict.fromkeys(specs):
            if spec in self._running:
                continue
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

    def stop(self, server: VllmServer) -> None:
        """Stop one server early (a test that kills the shadow, say)."""
        proc, _ = self._running.pop(server.spec)
        proc.stop()

    def close(self) -> None:
        for proc, _ in self._running.values():
            proc.stop()
        self._running.clear()
