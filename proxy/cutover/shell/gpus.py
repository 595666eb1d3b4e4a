"""Which GPUs the new container may take: the host's GPUs (nvidia-smi) against the
requests of the running containers. Pure apart from `nvidia_smi_gpus`.

A device is named by index ("0") or UUID ("GPU-..."); both name the same GPU. Without
a GPU list (no nvidia-smi where the driver runs, e.g. inside the sidecar) existence is
not checked, but a device that a running container asks for by the same name is still
refused: two vLLM engines on one GPU both size their KV cache for all of its memory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.cutover.driver import Conflict, NotFound

_SMI_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (\S+)\)\s*$")


@dataclass(frozen=True)
class HostGpu:
    index: str
    uuid: str
    name: str = ""


@dataclass(frozen=True)
class GpuHolder:
    """A running container and the device ids it asked for (("all",) for every GPU)."""

    name: str
    id: str
    devices: tuple[str, ...]


GpuLister = Callable[[], list[HostGpu]]


def parse_nvidia_smi_list(text: str) -> list[HostGpu]:
    """`nvidia-smi -L` output: "GPU 0: NVIDIA H200 (UUID: GPU-...)" per line."""
    gpus = []
    for line in text.splitlines():
        match = _SMI_LINE.match(line.strip())
        if match:
            gpus.append(HostGpu(index=match[1], name=match[2], uuid=match[3]))
    return gpus


def nvidia_smi_gpus() -> list[HostGpu]:
    """The host's GPUs; none when nvidia-smi is absent or fails (nothing to check)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi_list(done.stdout) if done.returncode == 0 else []


def _canonical(device: str, host: list[HostGpu]) -> str:
    for gpu in host:
        if device in (gpu.index, gpu.uuid):
            return gpu.index
    return device


def _expand(devices: Iterable[str], host: list[HostGpu]) -> set[str]:
    devices = tuple(devices)
    if "all" in devices:
        return {gpu.index for gpu in host} if host else {"all"}
    return {_canonical(device, host) for device in devices}


def check_gpus(requested: tuple[str, ...], host: list[HostGpu],
               holders: Iterable[GpuHolder]) -> None:
    """Raise NotFound for a device the host does not have, Conflict for one a running
    container holds; return when the request is empty."""
    if not requested:
        return
    if host:
        known = {gpu.index for gpu in host} | {gpu.uuid for gpu in host} | {"all"}
        missing = [device for device in requested if device not in known]
        if missing:
            listing = ", ".join(f"{gpu.index} ({gpu.uuid})" for gpu in host)
            raise NotFound(f"GPU {', '.join(map(repr, missing))} does not exist on this "
                           f"host; its GPUs: {listing}")
    wanted = _expand(requested, host)
    taken: dict[str, GpuHolder] = {}
    for holder in holders:
        for device in _expand(holder.devices, host):
            taken.setdefault(device, holder)
    clash = _overlap(wanted, taken)
    if clash:
        owners: dict[GpuHolder, list[str]] = {}
        for device in clash:
            owners.setdefault(taken.get(device) or taken["all"], []).append(device)
        held = "; ".join(f"GPU {', '.join(devices)} by running container {holder.name!r} "
                         f"({holder.id[:12]})" for holder, devices in owners.items())
        free = sorted({gpu.index for gpu in host} - set(taken))
        hint = f" (free: {', '.join(free) or 'none'})" if host else ""
        raise Conflict(f"the GPUs asked for are held: {held}; give the new container its "
                       f"own GPUs with --new-gpus{hint}")

def _overlap(wanted: set[str], taken: dict[str, GpuHolder]) -> list[str]:
    """Without a GPU list "all" stays a symbol that overlaps any device."""
    if "all" in taken:
        return sorted(wanted)
    if "all" in wanted:
        return sorted(taken)
    return sorted(wanted & taken.keys())
