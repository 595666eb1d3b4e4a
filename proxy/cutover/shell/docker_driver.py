"""`ContainerDriver` on a Docker engine, through the Docker SDK for Python (the only module
that imports it). The rules for what the new container takes from the old one are in
`docker_spec`, the URL mapping in `addressing`, the GPU check in `gpus`.

The engine is reached lazily, at the first call, and again after a failure: a proxy
started with `--driver docker` keeps relaying while the daemon is down, and the cutover
that needs it fails with a message that says what to fix.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import docker
import docker.errors
import requests.exceptions

from proxy.cutover import addressing, docker_spec
from proxy.cutover.driver import (
    LABEL_REPLACES,
    Conflict,
    ContainerInfo,
    DriverError,
    EngineUnavailable,
    NewContainerPlan,
    NotFound,
)
from proxy.cutover.shell import gpus

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/run/docker.sock"
LABEL_PREFIX = "label="


def _engine_message(base_url: str, exc: BaseException) -> str:
    """What an operator should do about an engine that does not answer."""
    text = f"{exc!r} {exc}"
    where = base_url or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    socket = where.removeprefix("unix://")
    if "Permission denied" in text or "PermissionError" in text:
        return (f"permission denied on the Docker socket {socket}: run as root or with the "
                f"socket's group (docker run --group-add $(stat -c %g {socket}))")
    if "No such file" in text or "FileNotFoundError" in text:
        return (f"the Docker socket {socket} does not exist: is dockerd running? In a "
                f"container, mount it (-v {DEFAULT_SOCKET}:{DEFAULT_SOCKET})")
    if "Connection refused" in text:
        return f"the Docker engine at {where} refuses connections: is dockerd running?"
    return f"cannot reach the Docker engine at {where}: {exc}"


class DockerDriver:
    """A Docker host's containers. `base_url` None: DOCKER_HOST or the default socket.
    `gpu_lister` lists the host's GPUs (default: nvidia-smi -L where the driver runs)."""

    def __init__(self, base_url: str | None = None, timeout_s: float = 120.0,
                 gpu_lister: gpus.GpuLister = gpus.nvidia_smi_gpus) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.gpu_lister = gpu_lister
        self._client: docker.DockerClient | None = None
        self._lock = threading.Lock()

    def _docker(self) -> docker.DockerClient:
        with self._lock:
            if self._client is None:
                kwargs: dict[str, Any] = {"version": "auto", "timeout": int(self.timeout_s)}
                client = (docker.DockerClient(base_url=self.base_url, **kwargs)
                          if self.base_url else docker.from_env(**kwargs))
                self._client = client
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    @contextmanager
    def _errors(self, what: str, image: str | None = None) -> Iterator[None]:
        """Docker's exceptions as DriverErrors with the operator's next step."""
        try:
            yield
        except docker.errors.ImageNotFound as exc:
            raise NotFound(f"image {image!r} is not on this host; docker pull it or build "
                           f"it first") from exc
        except docker.errors.NotFound as exc:
            raise NotFound(what) from exc
        except docker.errors.APIError as exc:
            message = f"{what}: {exc.explanation or exc}"
            conflict = exc.status_code == 409 or "multiple IDs" in message  # ambiguous prefix
            raise (Conflict(message) if conflict else DriverError(message)) from exc
        except requests.exceptions.Timeout as exc:
            self.close()
            raise EngineUnavailable(f"{what}: the Docker engine did not answer within "
                                    f"{self.timeout_s:.0f} s ({exc})") from exc
        except (docker.errors.DockerException, OSError) as exc:  # requests' errors included
            self.close()
            raise EngineUnavailable(_engine_message(self.base_url or "", exc)) from exc

    # -- reading ----------------------------------------------------------------------
    def _attrs(self, ref: str) -> dict[str, Any]:
        with self._errors(f"no container {ref!r} on this host"):
            return dict(self._docker().api.inspect_container(ref))

    def find(self, ref: str) -> ContainerInfo:
        if ref.startswith(LABEL_PREFIX):
            label = ref.removeprefix(LABEL_PREFIX)
            if "=" not in label:
                raise DriverError(f"expected label=KEY=VALUE, got {ref!r}")
            with self._errors(f"listing containers with {ref!r}"):
                found = self._docker().api.containers(all=True, filters={"label": label})
            if len(found) != 1:
                if not found:
                    raise NotFound(f"no container has the label {label!r}")
                names = ", ".join(sorted(c["Names"][0].lstrip("/") for c in found))
                raise Conflict(f"{len(found)} containers have the label {label!r} ({names}); "
                               f"name one of them")
            ref = found[0]["Id"]
        # Docker resolves a name, a full id or a unique id prefix (409 when ambiguous).
        return docker_spec.info_from_attrs(self._attrs(ref))

    def inspect(self, container_id: str) -> ContainerInfo:
        try:
            return docker_spec.info_from_attrs(self._attrs(container_id))
        except NotFound:
            return ContainerInfo(id=container_id, name="", image="", state="missing")

    def image_exists(self, image: str) -> bool:
        try:
            with self._errors(f"inspecting image {image!r}", image=image):
                self._docker().api.inspect_image(image)
        except NotFound:
            return False
        return True

    def _image_config(self, image: str) -> dict[str, Any]:
        with self._errors(f"inspecting image {image!r}", image=image):
            return dict(self._docker().api.inspect_image(image).get("Config") or {})

    def check_gpus(self, requested: tuple[str, ...]) -> None:
        if not requested:
            return
        host = self.gpu_lister()
        with self._errors("listing running containers"):
            running = self._docker().api.containers(filters={"status": "running"})
            holders = []
            for summary in running:
                attrs = self._docker().api.inspect_container(summary["Id"])
                devices = docker_spec.requested_gpus(attrs.get("HostConfig") or {})
                if devices:
                    holders.append(gpus.GpuHolder(attrs["Name"].lstrip("/"), attrs["Id"],
                                                  devices))
        gpus.check_gpus(requested, host, holders)

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        """The log, stdout and stderr, as `docker logs` prints it, streamed from its start
        (`verify`): the reader stops when it has read enough; closing this generator
        closes the stream, so the rest is never fetched."""
        what = f"no container {container_id!r} to read logs from"
        with self._errors(what):
            stream = self._docker().api.logs(container_id, stdout=True, stderr=True,
                                             stream=True, follow=False)
        try:
            while True:
                with self._errors(what):
                    chunk = next(stream, None)
                if chunk is None:
                    return
                yield bytes(chunk)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        """(usage, limit) in bytes, one sample of the container's stats (`eval memory`)."""
        with self._errors(f"no container {container_id!r} to read stats from"):
            stats = self._docker().api.stats(container_id, stream=False)
        memory = stats.get("memory_stats") or {}
        return memory.get("usage"), memory.get("limit")

    def logs_tail(self, container_id: str, lines: int = 40) -> str:
        with self._errors(f"no container {container_id!r} to read logs from"):
            raw = self._docker().api.logs(container_id, stdout=True, stderr=True, tail=lines)
        return bytes(raw).decode("utf-8", errors="replace")

    def url_for(self, info: ContainerInfo, like_url: str,
                old: ContainerInfo | None = None) -> str:
        """`old` defaults to the container `info` replaces (its LABEL_REPLACES)."""
        if old is None:
            replaced = info.labels.get(LABEL_REPLACES)
            if not replaced:
                raise DriverError(f"container {info.name!r} has no {LABEL_REPLACES} label: "
                                  f"cannot tell which container {like_url!r} reaches")
            old = self.find(replaced)
        return addressing.url_like(old, info, like_url)

    # -- changing ---------------------------------------------------------------------
    def create_like(self, old: ContainerInfo, plan: NewContainerPlan) -> ContainerInfo:
        """Create, join the networks, start. The GPUs it will ask for are checked first:
        inheriting the old one's request (plan.gpus None) is refused while the old one
        runs on them. A container that cannot start is removed again (its error is in
        the message): nothing is left half-made."""
        attrs = self._attrs(old.id)
        self._image_config(plan.image)  # NotFound with the pull/build hint
        try:
            old_image = self._image_config(str(attrs.get("Image", "")))
        except NotFound:  # untagged and gone: every setting counts as the container's own
            log.warning("the old container's image %s is gone; copying its whole config",
                        attrs.get("Image"))
            old_image = {}
        request = docker_spec.create_request(attrs, old_image, plan)
        self.check_gpus(docker_spec.requested_gpus(request["HostConfig"]))
        networks = request.pop("x-networks")
        api = self._docker().api
        with self._errors(f"creating container {plan.name!r}", image=plan.image):
            created = api.create_container_from_config(request, name=plan.name)
        new_id = created["Id"]
        try:
            with self._errors(f"starting container {plan.name!r}"):
                for network in networks:
                    api.connect_container_to_network(new_id, network)
                api.start(new_id)
        except DriverError:
            self.remove(new_id)
            raise
        log.info("created %s (%s) from %s like %s", plan.name, new_id[:12], plan.image,
                 old.name)
        return self.inspect(new_id)

    def start(self, container_id: str) -> None:
        with self._errors(f"starting container {container_id!r}"):
            self._docker().api.start(container_id)

    def stop(self, container_id: str, grace_s: float) -> None:
        grace = max(0, math.ceil(grace_s))
        with self._errors(f"stopping container {container_id!r}"):
            # The HTTP call waits for the grace period on top of the usual timeout.
            self._docker().api.stop(container_id, timeout=grace)

    def remove(self, container_id: str) -> None:
        try:
            with self._errors(f"removing container {container_id!r}"):
                self._docker().api.remove_container(container_id, force=True)
        except NotFound:
            return
        except Conflict as exc:  # "removal already in progress" is gone enough
            if "in progress" not in str(exc):
                raise

    def save_image(self, image: str, path: str) -> int:
        """Streamed to PATH.tmp, fsynced, renamed: PATH is whole or absent."""
        self._image_config(image)  # NotFound with the pull/build hint
        partial = f"{path}.tmp"
        written = 0
        try:
            with _file_errors(path):
                out = open(partial, "wb")  # noqa: SIM115 (closed by the `with` below)
            with out:
                with self._errors(f"saving image {image!r}", image=image):
                    for chunk in self._docker().api.get_image(image):
                        with _file_errors(path):
                            out.write(chunk)
                        written += len(chunk)
                with _file_errors(path):
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(partial, path)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(partial)
            raise
        log.info("saved image %s to %s (%d bytes)", image, path, written)
        return written


@contextmanager
def _file_errors(path: str) -> Iterator[None]:
    """The backup file's errors are the operator's disk, not the engine."""
    try:
        yield
    except OSError as exc:
        raise DriverError(f"cannot write the image backup {path!r}: {exc.strerror}") from exc
