"""The container driver interface the cutover acts through (Docker today, Kubernetes later).

Everything here is a value or a Protocol: the state machine and its tests never import
the Docker SDK. Calls are synchronous (the Docker SDK is); the reconciler runs them in a
thread so the proxy's event loop never waits on the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

ContainerState = Literal["created", "running", "restarting", "paused", "exited", "dead",
                         "removing", "missing"]

LABEL_CUTOVER = "io.vllm-cutover.cutover"  # the cutover id that created the container
LABEL_ROLE = "io.vllm-cutover.role"  # "new"
LABEL_REPLACES = "io.vllm-cutover.replaces"  # the old container's name


class DriverError(RuntimeError):
    """A driver call that cannot be done; the message says what and why, for the operator."""


class EngineUnavailable(DriverError):
    """The container engine cannot be reached (daemon down, socket not mounted, no rights)."""


class NotFound(DriverError):
    """No container (or image) matches the reference."""


class Conflict(DriverError):
    """The request collides with what exists: an ambiguous reference, a name in use, GPUs
    held by a running container."""


def http_status(exc: DriverError) -> int:
    """The admin API's answer to a start the driver refused: what the cutover and the tune
    both say."""
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, EngineUnavailable):
        return 503
    return 500


@dataclass(frozen=True)
class NetworkAttachment:
    ip: str | None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerInfo:
    """What the cutover needs to know of one container (a snapshot)."""

    id: str
    name: str
    image: str  # the reference it was created from (Config.Image)
    state: ContainerState
    exit_code: int | None = None
    health: str | None = None  # healthy / unhealthy / starting; None: no healthcheck
    labels: Mapping[str, str] = field(default_factory=dict)
    networks: Mapping[str, NetworkAttachment] = field(default_factory=dict)
    # container port ("8000/tcp") -> published host (ip, port) pairs
    ports: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()  # device ids it asked for; ("all",) for every GPU
    command: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    shm_size_bytes: int | None = None
    ipc_mode: str | None = None
    restart_policy: str | None = None


@dataclass(frozen=True)
class NewContainerPlan:
    """How the new container differs from the old one; None/empty keeps the old value."""

    image: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)  # added to the old ones
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # set (added or replaced)
    env_remove: tuple[str, ...] = ()
    gpus: tuple[str, ...] | None = None  # device ids; None: the old container's request


class ContainerDriver(Protocol):
    """A host's containers, as the cutover sees them."""

    def find(self, ref: str) -> ContainerInfo:
        """By name, id (or unique id prefix) or `label=KEY=VALUE` (exactly one match)."""

    def inspect(self, container_id: str) -> ContainerInfo:
        """A fresh snapshot; state "missing" when it no longer exists."""

    def image_exists(self, image: str) -> bool: ...

    def check_gpus(self, gpus: tuple[str, ...]) -> None:
        """Raise Conflict/NotFound when a device does not exist or a running container
        holds it; nothing to check on a host without GPUs or for an empty request."""

    def create_like(self, old: ContainerInfo, plan: NewContainerPlan) -> ContainerInfo:
        """Create and start a container with `old`'s configuration changed by `plan`."""

    def start(self, container_id: str) -> None: ...

    def stop(self, container_id: str, grace_s: float) -> None:
        """SIGTERM (the image's stop signal), then SIGKILL after `grace_s`."""

    def remove(self, container_id: str) -> None:
        """Force-remove; no error when it is already gone."""

    def logs_tail(self, container_id: str, lines: int = 40) -> str: ...

    def url_for(self, info: ContainerInfo, like_url: str) -> str:
        """The URL the proxy reaches `info` at, built the way `like_url` reaches the old
        container (network name or IP -> the new one's on that network; a published host
        port -> the new one's published port; same container port and path)."""

    def save_image(self, image: str, path: str) -> int:
        """`docker save` of `image` into `path` (written atomically); bytes written."""
