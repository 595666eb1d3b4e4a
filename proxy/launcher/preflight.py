"""Preflight checks of the GPU and FlashInfer before vLLM is started.

`run_preflight` answers: is there a CUDA device, which NVFP4 family is its compute
capability, is FlashInfer installed at the version this vLLM pins, does
`mm_fp4.is_backend_supported` accept the chosen backend here, and (with `self_test`)
does an NVFP4 GEMM give the right numbers. A chosen path that cannot work on the GPU of
this host is `fatal`: the launcher then stops before vLLM spends minutes loading a model.
A host without CUDA (a CPU build of vLLM) is never fatal: FP4 GEMM settings have no
effect there. The device is found with nvidia-smi where it can (torch costs seconds to
import); torch and flashinfer are imported lazily, only when a check needs them
(`mm_fp4.is_backend_supported` for a chosen FlashInfer backend, the self-test).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from proxy.launcher import capabilities, checks, gpus, probes
from proxy.launcher.checks import Check, Severity

__all__ = [
    "Check",
    "PreflightReport",
    "Severity",
    "detect_compute_capability",
    "detect_compute_capability_fast",
    "run_preflight",
]


@dataclass(frozen=True)
class PreflightReport:
    """The checks in order, plus a summary of the facts they found (for --report-json)."""

    checks: tuple[Check, ...]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """False when any check is fatal: the launcher must not exec vLLM."""
        return all(c.severity != "fatal" for c in self.checks)

    @property
    def fatal(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.severity == "fatal")

    @property
    def fatal_message(self) -> str:
        """What stops the launch, one sentence per fatal check; empty when nothing does."""
        return "; ".join(c.message for c in self.fatal)

    def lines(self) -> list[str]:
        """One human line per check, e.g. `preflight fatal flashinfer: ...`."""
        return [f"preflight {c.severity} {c.name}: {c.message}" for c in self.checks]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "summary": dict(self.summary),
            "checks": [asdict(c) for c in self.checks],
        }


def detect_compute_capability() -> tuple[int, int] | None:
    """(major, minor) of CUDA device 0 via torch; None without torch or CUDA."""
    return probes.probe_cuda().capability


def detect_compute_capability_fast() -> tuple[int, int] | None:
    """The same answer, usually without importing torch (nvidia-smi, driver files):
    tens of ms instead of seconds, for the launcher's start-up budget."""
    return probes.probe_cuda_fast().capability


def run_preflight(
    *,
    vllm_version: str,
    compute_capability: tuple[int, int] | None,
    linear_backend: str | None,
    moe_backend: str | None,
    self_test: bool,
    vllm_python: str | None = None,
) -> PreflightReport:
    """Check CUDA, capability, FlashInfer (installed, version vs vLLM's pin) and
    `mm_fp4.is_backend_supported` for the chosen vLLM linear backend name
    (e.g. "flashinfer_cutedsl"); with self_test, run the NVFP4 GEMM check.
    FlashInfer is looked up for `vllm_python`, the interpreter that will run vLLM."""
    probe = probes.probe_cuda_fast()
    cc = compute_capability if compute_capability is not None else probe.capability
    family = capabilities.family_of(cc)
    ctx = checks.Context(
        vllm_version=vllm_version,
        cc=cc,
        family=family,
        linear=gpus.normalize_backend(linear_backend),
        moe=gpus.normalize_backend(moe_backend),
        enforce=probe.available,
        fi_version=probes.flashinfer_version(vllm_python),
        pin=gpus.flashinfer_pin(vllm_version),
        fi_local=probes.is_this_interpreter(vllm_python),
    )
    found = [checks.cuda_check(probe, compute_capability), checks.capability_check(ctx)]
    found += checks.flashinfer_checks(ctx)
    supported: bool | None = None
    fi_backend = gpus.flashinfer_backend_name(ctx.linear)
    if fi_backend is not None:
        check = checks.mm_fp4_check(ctx, fi_backend)
        supported = check.details.get("supported")
        found.append(check)
    elif ctx.linear not in (None, "auto"):
        found.append(checks.linear_check(ctx))
    if ctx.moe in capabilities.FLASHINFER_MOE_FAMILIES:
        found.append(checks.moe_check(ctx))
    self_test_json: dict[str, Any] | None = None
    if self_test:
        check = checks.self_test_check(ctx, probe)
        self_test_json = check.details.get("result")
        found.append(check)
    summary = {
        "cuda": probe.available,
        "device": probe.device_name,
        "torch": probe.torch_version,
        "compute_capability": None if cc is None else checks.cc_text(cc),
        "gpu_family": family,
        "flashinfer_version": ctx.fi_version,
        "flashinfer_pin": ctx.pin,
        "linear_backend": ctx.linear,
        "flashinfer_backend": fi_backend,
        "backend_supported": supported,
        "vllm_kernel": gpus.vllm_kernel_for(cc, ctx.linear),
        "self_test": self_test_json,
    }
    return PreflightReport(tuple(found), summary)
