"""What `verify --container` and `eval memory --container` read of a container: its log
and its memory, through the cutover's Docker driver (the one module that talks to the
Docker socket), behind a read-only Protocol so tests and other engines can stand in."""

from __future__ import annotations

from typing import Protocol

from proxy.cutover.driver import DriverError
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.results import ContainerMemory


class ContainerReader(Protocol):
    """Reads, never changes, a host's containers (`DockerDriver` is one)."""

    def logs(self, container_id: str) -> str:
        """The whole log, stdout and stderr."""

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        """(usage, limit) in bytes."""


def docker_containers() -> ContainerReader:
    """The local Docker engine (DOCKER_HOST or the default socket), reached at first use."""
    from proxy.cutover.docker_driver import DockerDriver  # lazy: only with --container

    return DockerDriver()


def container_log(reader: ContainerReader, container: str) -> str:
    try:
        return reader.logs(container)
    except DriverError as exc:
        raise EvalInputError(f"--container {container!r}: {exc}") from None


def container_memory(reader: ContainerReader, container: str) -> ContainerMemory:
    """The container's memory use and limit from Docker's stats (one sample)."""
    try:
        usage, limit = reader.memory_use(container)
    except DriverError as exc:
        raise EvalInputError(f"--container {container!r}: {exc}") from None
    return ContainerMemory(container, usage, limit)
