"""Probes of this host: CUDA device 0 (torch, else nvidia-smi) and FlashInfer.

Each probe imports torch or flashinfer lazily and turns every failure into data.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from proxy.launcher import capabilities
from proxy.launcher.installed import is_this_interpreter, venv_version

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CudaProbe:
    """What this host's torch (or nvidia-smi, without torch) says about CUDA device 0."""

    available: bool
    capability: tuple[int, int] | None = None
    device_name: str | None = None
    torch_version: str | None = None  # None: torch not importable
    source: Literal["torch", "nvidia-smi", "none"] = "none"
    error: str | None = None


def probe_cuda() -> CudaProbe:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch raises more than ImportError
        return _probe_nvidia_smi(f"torch not importable: {exc}")
    version = str(getattr(torch, "__version__", "unknown"))
    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
            return CudaProbe(False, torch_version=version, source="torch")
        major, minor = torch.cuda.get_device_capability(0)
        name = str(torch.cuda.get_device_name(0))
    except Exception as exc:  # noqa: BLE001 - driver errors surface as RuntimeError or worse
        return CudaProbe(False, torch_version=version, source="torch", error=str(exc))
    return CudaProbe(True, (int(major), int(minor)), name, version, "torch")


DRIVER_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version")


def probe_cuda_fast() -> CudaProbe:
    """Like `probe_cuda` without importing torch where it can: nvidia-smi first (tens of
    ms); no NVIDIA driver files -> no CUDA; torch only when a driver is there but
    nvidia-smi is not (a container without the `utility` driver capability)."""
    smi = _probe_nvidia_smi("fast probe")
    if smi.available or smi.error == "CUDA_VISIBLE_DEVICES hides every GPU":
        return smi
    if not any(os.path.exists(p) for p in DRIVER_PATHS):
        return CudaProbe(False, error="no NVIDIA driver on this host")
    return probe_cuda()


def _probe_nvidia_smi(why: str) -> CudaProbe:
    """nvidia-smi (driver 510+) knows the capability of the device torch calls 0."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return CudaProbe(False, error=why)
    cmd = [exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        first = visible.split(",")[0].strip()
        if not first or first.startswith("-"):
            return CudaProbe(
                False, source="nvidia-smi", error="CUDA_VISIBLE_DEVICES hides every GPU"
            )
        cmd.append(f"--id={first}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
        name, cap = (part.strip() for part in out.stdout.splitlines()[0].rsplit(",", 1))
        major, minor = (int(p) for p in cap.split("."))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return CudaProbe(False, error=f"{why}; nvidia-smi: {exc}")
    return CudaProbe(True, (major, minor), name, None, "nvidia-smi", why)


_FLASHINFER_VERSION_SCRIPT = (
    "from importlib import metadata\n"
    "try:\n    print(metadata.version('flashinfer-python'))\n"
    "except metadata.PackageNotFoundError:\n    pass\n"
)


def flashinfer_version(python: str | None = None) -> str | None:
    """flashinfer-python version installed for `python` (the interpreter that runs vLLM;
    default this one), from its metadata without importing it; None when missing."""
    if not is_this_interpreter(python):
        assert python is not None
        known, version = venv_version(python, ("flashinfer-python",))
        if known:
            return version
        try:
            out = subprocess.run([python, "-I", "-c", _FLASHINFER_VERSION_SCRIPT],
                                 capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("cannot ask %s for its flashinfer-python version: %s", python, exc)
            return None
        return out.stdout.strip() or None
    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return None


def mm_fp4_supported(
    fi_backend: str, cc: tuple[int, int], ask_flashinfer: bool = True
) -> tuple[bool, str]:
    """(supported, source): ask FlashInfer when wanted and importable, else the facts
    table. Importing flashinfer (and torch) takes seconds: callers planning for a GPU
    that is not on this host pass ask_flashinfer=False."""
    table = f"FlashInfer {capabilities.FLASHINFER_TABLE_VERSION} support table"
    if not ask_flashinfer:
        return capabilities.mm_fp4_supports(fi_backend, cc), table
    try:
        import flashinfer

        return bool(flashinfer.mm_fp4.is_backend_supported(fi_backend, capabilities.cc_int(cc))), (
            f"flashinfer {getattr(flashinfer, '__version__', '?')} mm_fp4.is_backend_supported"
        )
    except Exception as exc:  # noqa: BLE001 - not installed, too old (< 0.5), or broken
        logger.debug("mm_fp4.is_backend_supported unavailable: %s", exc)
        return capabilities.mm_fp4_supports(fi_backend, cc), table
