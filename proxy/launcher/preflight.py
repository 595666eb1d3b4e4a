"""Preflight checks of the GPU and FlashInfer before vLLM is started (CONTRACT STUB).

Owned by the preflight work; the launcher codes against these names only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["ok", "info", "warning", "fatal"]


@dataclass(frozen=True)
class Check:
    name: str  # e.g. "cuda", "compute_capability", "flashinfer", "flashinfer_version", "mm_fp4_backend", "self_test"
    severity: Severity
    message: str  # one human sentence
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """False when any check is fatal: the launcher must not exec vLLM."""
        return all(c.severity != "fatal" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


def detect_compute_capability() -> tuple[int, int] | None:
    """(major, minor) of CUDA device 0 via torch; None without torch or CUDA."""
    raise NotImplementedError


def run_preflight(
    *,
    vllm_version: str,
    compute_capability: tuple[int, int] | None,
    linear_backend: str | None,
    moe_backend: str | None,
    self_test: bool,
) -> PreflightReport:
    """Check CUDA, capability, FlashInfer (installed, version vs vLLM's pin) and
    `mm_fp4.is_backend_supported` for the chosen vLLM linear backend name
    (e.g. "flashinfer_cutedsl"); with self_test, run the NVFP4 GEMM check."""
    raise NotImplementedError
