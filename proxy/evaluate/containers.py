"""What `verify --container` and `eval memory --container` read of a container: its log
and its memory, through the cutover's Docker driver (the one module that talks to the
Docker socket), behind a read-only Protocol so tests and other engines can stand in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from proxy.cutover.driver import DriverError
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.kernel_log import startup_lines
from proxy.evaluate.results import ContainerMemory


class ContainerReader(Protocol):
    """Reads, never changes, a host's containers (`DockerDriver` is one)."""

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        """The log, stdout and stderr, from its start, in chunks; closed when read enough."""

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        """(usage, limit) in bytes."""


def docker_containers() -> ContainerReader:
    """The local Docker engine (DOCKER_HOST or the default socket), reached at first use."""
    from proxy.cutover.shell.docker_driver import DockerDriver  # lazy: only with --container

    return DockerDriver()


def container_log(reader: ContainerReader, container: str, max_bytes: int) -> str:
    """The lines `verify` reads from the first `max_bytes` of the log (as `--log`): the
    stream is closed there, so a log of any size costs bounded memory."""
    chunks = reader.log_chunks(container)
    try:
        log, _ = startup_lines(chunks, max_bytes)
    except DriverError as exc:
        raise EvalInputError(f"--container {container!r}: {exc}") from None
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return log


def container_memory(reader: ContainerReader, container: str) -> ContainerMemory:
    """The container's memory use and limit from Docker's stats (one sample)."""
    try:
        usage, limit = reader.memory_use(container)
    except DriverError as exc:
        raise EvalInputError(f"--container {container!r}: {exc}") from None
    return ContainerMemory(container, usage, limit)
