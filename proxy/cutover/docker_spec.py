"""Docker's inspect JSON in, values out: a container's snapshot, and the create request of
its successor. Pure (dicts in, dicts out) so the rules are tested without an engine.

What the new container takes from the old one:
- HostConfig whole (binds, mounts, shm, ipc, ulimits, devices and GPU requests, caps,
  security options, log config, restart policy, network mode...), except that published
  ports get ephemeral host ports on the same host IP (the old one still holds its ports),
  the GPU request follows the plan, and a container-id file is not reused.
- Config parts that belong to the deployment, each only where the old container set it
  itself. Inspect shows the merge of image and container, so a value equal to the old
  image's own is taken as inherited and left to the NEW image (its PATH, its labels, its
  entrypoint: our launcher). Per key for env and labels, per field for the rest. The
  command counts as the old one's own when it differs from the old image's CMD, or when
  the entrypoint was set explicitly (Docker drops the image's CMD then).
- Networks: the same ones, joined without the old aliases: a shared alias makes Docker's
  DNS answer with both containers, sending traffic that bypasses the proxy to an engine
  not yet proven. Static IPs and MAC addresses are not copied either (they would clash).
- Compose's bookkeeping labels (`com.docker.compose.*`) and our own from an earlier
  cutover are dropped: compose must not take the new container for a replica of its
  service. Anonymous volumes stay with the old container.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from proxy.cutover.driver import (
    LABEL_REPLACES,
    LABEL_ROLE,
    ContainerInfo,
    ContainerState,
    NetworkAttachment,
    NewContainerPlan,
)

Json = dict[str, Any]
NVIDIA_CAPABILITY = "gpu"
DROPPED_LABEL_PREFIXES = ("com.docker.compose.", "io.vllm-cutover.")
# Config fields copied when they differ from the old image's (else the new image's apply).
IMAGE_DEFAULTED = ("User", "WorkingDir", "Healthcheck", "StopSignal")
STATES = ("created", "running", "restarting", "paused", "exited", "dead", "removing")


def env_map(entries: list[str] | None) -> dict[str, str]:
    pairs = (entry.partition("=") for entry in entries or ())
    return {key: value for key, _, value in pairs}


def is_gpu_request(request: Mapping[str, Any]) -> bool:
    capabilities = request.get("Capabilities") or []
    return request.get("Driver") == "nvidia" or any(
        NVIDIA_CAPABILITY in group for group in capabilities)


def requested_gpus(host_config: Mapping[str, Any]) -> tuple[str, ...]:
    """Device ids a container asks for: its ids, ("all",) for Count -1, "0".."N-1" for
    Count N (how Docker's nvidia hook turns a count into devices)."""
    ids: list[str] = []
    for request in host_config.get("DeviceRequests") or ():
        if not is_gpu_request(request):
            continue
        if request.get("DeviceIDs"):
            ids.extend(str(device) for device in request["DeviceIDs"])
        elif request.get("Count", 0) < 0:
            return ("all",)
        else:
            ids.extend(str(index) for index in range(int(request.get("Count", 0))))
    return tuple(ids)


def info_from_attrs(attrs: Mapping[str, Any]) -> ContainerInfo:
    """A ContainerInfo from `docker inspect` of a container."""
    config, host = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
    state = attrs.get("State") or {}
    settings = attrs.get("NetworkSettings") or {}
    networks = {
        name: NetworkAttachment(ip=endpoint.get("IPAddress") or None,
                                aliases=tuple(endpoint.get("Aliases") or ()))
        for name, endpoint in (settings.get("Networks") or {}).items()
    }
    ports = {
        port: tuple((b.get("HostIp", ""), int(b["HostPort"])) for b in bindings or ()
                    if b.get("HostPort"))
        for port, bindings in (settings.get("Ports") or {}).items()
    }
    status = state.get("Status", "created")
    restart = (host.get("RestartPolicy") or {}).get("Name") or None
    return ContainerInfo(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        image=config.get("Image", ""),
        state=cast(ContainerState, status if status in STATES else "dead"),
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        health=(state.get("Health") or {}).get("Status"),
        labels=dict(config.get("Labels") or {}),
        networks=networks,
        ports={port: bound for port, bound in ports.items() if bound},
        gpus=requested_gpus(host),
        command=tuple(config.get("Cmd") or ()),
        entrypoint=tuple(config.get("Entrypoint") or ()),
        env=env_map(config.get("Env")),
        shm_size_bytes=host.get("ShmSize"),
        ipc_mode=host.get("IpcMode") or None,
        restart_policy=restart,
    )


def _own(container: Mapping[str, Any], image: Mapping[str, Any]) -> dict[str, Any]:
    """Entries of a merged mapping that the container set itself."""
    return {key: value for key, value in container.items() if image.get(key) != value}


def _gpu_requests(requests: list[Json], gpus: tuple[str, ...]) -> list[Json]:
    """The old device requests with the GPU one asking for `gpus` instead."""
    kept = [request for request in requests if not is_gpu_request(request)]
    template = next((r for r in requests if is_gpu_request(r)),
                    {"Driver": "nvidia", "Capabilities": [[NVIDIA_CAPABILITY]]})
    if not gpus:
        return kept
    if gpus == ("all",):
        return [*kept, {**template, "Count": -1, "DeviceIDs": None}]
    return [*kept, {**template, "Count": 0, "DeviceIDs": list(gpus)}]


def host_config_like(old_host: Mapping[str, Any], plan: NewContainerPlan) -> Json:
    host = dict(old_host)
    host["PortBindings"] = {
        port: [{"HostIp": b.get("HostIp", ""), "HostPort": ""} for b in bindings or ()]
        for port, bindings in (old_host.get("PortBindings") or {}).items()
    }
    host["ContainerIDFile"] = ""
    if plan.gpus is not None:
        host["DeviceRequests"] = _gpu_requests(list(old_host.get("DeviceRequests") or ()),
                                               plan.gpus)
    return host


def _command(config: Mapping[str, Any], image: Mapping[str, Any],
             plan: NewContainerPlan) -> tuple[list[str] | None, list[str] | None]:
    """(Entrypoint, Cmd) for the create request; None leaves the new image's."""
    entrypoint = config.get("Entrypoint")
    own_entrypoint = entrypoint != image.get("Entrypoint")
    cmd = config.get("Cmd")
    own_cmd = own_entrypoint or cmd != image.get("Cmd")
    new_entrypoint = list(plan.entrypoint) if plan.entrypoint is not None else (
        entrypoint if own_entrypoint else None)
    new_cmd = list(plan.command) if plan.command is not None else (cmd if own_cmd else None)
    if new_entrypoint is not None and new_cmd is None:
        new_cmd = []  # an explicit entrypoint runs alone, as with `docker run --entrypoint`
    return new_entrypoint, new_cmd


def _labels(config: Mapping[str, Any], image: Mapping[str, Any], old_name: str,
            plan: NewContainerPlan) -> dict[str, str]:
    own = _own(config.get("Labels") or {}, image.get("Labels") or {})
    kept = {k: v for k, v in own.items() if not k.startswith(DROPPED_LABEL_PREFIXES)}
    return {**kept, LABEL_ROLE: "new", LABEL_REPLACES: old_name, **plan.labels}


def _env(config: Mapping[str, Any], image: Mapping[str, Any],
         plan: NewContainerPlan) -> list[str]:
    own = _own(env_map(config.get("Env")), env_map(image.get("Env")))
    merged = {**own, **plan.env}
    return [f"{key}={value}" for key, value in merged.items() if key not in plan.env_remove]


def create_request(old: Mapping[str, Any], old_image_config: Mapping[str, Any],
                   plan: NewContainerPlan) -> Json:
    """The body of `POST /containers/create` for the new container, and the networks it
    joins after creation (key "x-networks": API 1.41 takes one network at create)."""
    config, image = old.get("Config") or {}, old_image_config
    host = host_config_like(old.get("HostConfig") or {}, plan)
    entrypoint, cmd = _command(config, image, plan)
    exposed = _own(config.get("ExposedPorts") or {}, image.get("ExposedPorts") or {})
    exposed.update({port: {} for port in host["PortBindings"]})
    request: Json = {
        "Image": plan.image,
        "Entrypoint": entrypoint,
        "Cmd": cmd,
        "Env": _env(config, image, plan),
        "Labels": _labels(config, image, str(old.get("Name", "")).lstrip("/"), plan),
        "ExposedPorts": exposed,
        "Volumes": _own(config.get("Volumes") or {}, image.get("Volumes") or {}),
        "Tty": bool(config.get("Tty")),
        "OpenStdin": bool(config.get("OpenStdin")),
        "HostConfig": host,
    }
    for key in IMAGE_DEFAULTED:
        if config.get(key) != image.get(key):
            request[key] = config.get(key)
    if config.get("StopTimeout") is not None:
        request["StopTimeout"] = config["StopTimeout"]
    if config.get("Hostname") and not str(old.get("Id", "")).startswith(config["Hostname"]):
        request["Hostname"] = config["Hostname"]  # set by the user (Docker's is the id)
    mode = str(host.get("NetworkMode") or "default")
    networks = list((old.get("NetworkSettings") or {}).get("Networks") or {})
    first = mode if mode in networks else None
    if first is not None:
        request["NetworkingConfig"] = {"EndpointsConfig": {first: {}}}
    request["x-networks"] = [name for name in networks if name != first and
                             not _is_mode_network(mode, name)]
    return request


def _is_mode_network(mode: str, name: str) -> bool:
    """The default bridge is joined through NetworkMode "default"; host/none/container:
    modes join nothing else."""
    return (mode == "default" and name == "bridge") or mode in ("host", "none") or \
        mode.startswith("container:")
