"""Preflight checks of the GPU and FlashInfer before vLLM is started.

`run_preflight` answers: is there a CUDA device, which NVFP4 family is its compute
capability, is FlashInfer installed at the version this vLLM pins, does
`mm_fp4.is_backend_supported` accept the chosen backend here, and (with `self_test`)
does an NVFP4 GEMM give the right numbers. A chosen path that cannot work on the GPU of
this host is `fatal`: the launcher then stops before vLLM spends minutes loading a model.
A host without CUDA (a CPU build of vLLM) is never fatal: FP4 GEMM settings have no
effect there. torch and flashinfer are imported lazily, only when a check needs them.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from proxy.launcher import gpus, probes
from proxy.launcher.probes import CudaProbe

logger = logging.getLogger(__name__)

Severity = Literal["ok", "info", "warning", "fatal"]


@dataclass(frozen=True)
class Check:
    name: str  # "cuda", "compute_capability", "flashinfer", "flashinfer_version", "mm_fp4_backend", "linear_backend", "moe_backend", "self_test"
    severity: Severity
    message: str  # one human sentence
    details: dict[str, Any] = field(default_factory=dict)


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
) -> PreflightReport:
    """Check CUDA, capability, FlashInfer (installed, version vs vLLM's pin) and
    `mm_fp4.is_backend_supported` for the chosen vLLM linear backend name
    (e.g. "flashinfer_cutedsl"); with self_test, run the NVFP4 GEMM check."""
    probe = probes.probe_cuda()
    cc = compute_capability if compute_capability is not None else probe.capability
    family = gpus.gpu_family(cc)
    ctx = _Context(
        vllm_version=vllm_version,
        cc=cc,
        family=family,
        linear=gpus.normalize_backend(linear_backend),
        moe=gpus.normalize_backend(moe_backend),
        enforce=probe.available,
        fi_version=probes.flashinfer_version(),
        pin=gpus.flashinfer_pin(vllm_version),
    )
    checks = [_cuda_check(probe, compute_capability), _capability_check(ctx)]
    checks += _flashinfer_checks(ctx)
    supported: bool | None = None
    fi_backend = gpus.flashinfer_backend_name(ctx.linear)
    if fi_backend is not None:
        check = _mm_fp4_check(ctx, fi_backend)
        supported = check.details.get("supported")
        checks.append(check)
    elif ctx.linear not in (None, "auto"):
        checks.append(_linear_check(ctx))
    if ctx.moe in gpus.FLASHINFER_MOE_FAMILIES:
        checks.append(_moe_check(ctx))
    self_test_json: dict[str, Any] | None = None
    if self_test:
        check = _self_test_check(ctx, probe)
        self_test_json = check.details.get("result")
        checks.append(check)
    summary = {
        "cuda": probe.available,
        "device": probe.device_name,
        "torch": probe.torch_version,
        "compute_capability": None if cc is None else _cc_text(cc),
        "gpu_family": family,
        "flashinfer_version": ctx.fi_version,
        "flashinfer_pin": ctx.pin,
        "linear_backend": ctx.linear,
        "flashinfer_backend": fi_backend,
        "backend_supported": supported,
        "vllm_kernel": gpus.vllm_kernel_for(cc, ctx.linear),
        "self_test": self_test_json,
    }
    return PreflightReport(tuple(checks), summary)


@dataclass(frozen=True)
class _Context:
    vllm_version: str
    cc: tuple[int, int] | None
    family: gpus.GpuFamily
    linear: str | None
    moe: str | None
    enforce: bool  # a CUDA device is here: paths that cannot work are fatal
    fi_version: str | None
    pin: str | None

    @property
    def cc_text(self) -> str:
        return _cc_text(self.cc)

    def severe(self) -> Severity:
        return "fatal" if self.enforce else "warning"

    def install_hint(self) -> str:
        return f"flashinfer-python=={self.pin}" if self.pin else "flashinfer-python"


def _cc_text(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def _cuda_check(probe: CudaProbe, given: tuple[int, int] | None) -> Check:
    details = asdict(probe)
    if probe.available:
        msg = f"CUDA device 0: {probe.device_name}, compute capability {_cc_text(probe.capability)}"
        if given is not None and probe.capability != given:
            return Check(
                "cuda",
                "warning",
                f"{msg}, but {_cc_text(given)} was given: checks use the given one",
                details,
            )
        return Check("cuda", "ok", f"{msg} (via {probe.source})", details)
    msg = "no CUDA device: FP4 GEMM settings have no effect on this host"
    if probe.error:
        msg += f" ({probe.error})"
    if given is not None:
        msg += f"; checks below are for the given compute capability {_cc_text(given)}"
    return Check("cuda", "info", msg, details)


def _capability_check(ctx: _Context) -> Check:
    details = {"compute_capability": ctx.cc_text, "family": ctx.family}
    label = gpus.FAMILY_LABEL[ctx.family]
    if ctx.family == "none":
        return Check(
            "compute_capability", "info", "none known (no CUDA device, none given)", details
        )
    text = f"{ctx.cc_text}: {label}"
    if ctx.family in ("sm100", "sm120"):
        return Check("compute_capability", "ok", text, details)
    if ctx.family == "marlin":
        return Check(
            "compute_capability",
            "warning",
            f"{text}; vLLM will log: {gpus.MARLIN_WARNING}",
            details,
        )
    severity: Severity = "warning" if ctx.family == "unsupported" else "info"
    return Check("compute_capability", severity, text, details)


def _flashinfer_checks(ctx: _Context) -> list[Check]:
    needed_by = [
        f"--linear-backend {ctx.linear}" if gpus.flashinfer_backend_name(ctx.linear) else "",
        f"--moe-backend {ctx.moe}" if ctx.moe in gpus.FLASHINFER_MOE_FAMILIES else "",
    ]
    needed = " and ".join(n for n in needed_by if n)
    details = {"version": ctx.fi_version, "pin": ctx.pin, "needed_by": needed or None}
    checks = []
    if ctx.fi_version is not None:
        checks.append(
            Check("flashinfer", "ok", f"flashinfer-python {ctx.fi_version} installed", details)
        )
    elif needed and ctx.family in ("sm100", "sm120"):
        checks.append(
            Check(
                "flashinfer",
                ctx.severe(),
                (
                    f"FlashInfer is not installed but {needed} needs it: install {ctx.install_hint()} "
                    "(the version vLLM pins), or choose a backend without FlashInfer (--policy "
                    "preserve keeps vLLM's CUTLASS kernel, or --linear-backend cutlass)"
                ),
                details,
            )
        )
    elif needed:
        checks.append(
            Check(
                "flashinfer",
                "warning",
                f"FlashInfer is not installed ({needed} asks for it)",
                details,
            )
        )
    else:
        checks.append(
            Check(
                "flashinfer",
                "info",
                "FlashInfer is not installed (the chosen backends do not need it)",
                details,
            )
        )
    if ctx.pin is None:
        checks.append(
            Check(
                "flashinfer_version",
                "info",
                (
                    f"no known FlashInfer pin for vLLM {ctx.vllm_version} (known: 0.22, 0.29, "
                    "0.31-0.33)"
                ),
                details,
            )
        )
    elif ctx.fi_version is not None:
        if _same_version(ctx.fi_version, ctx.pin):
            checks.append(
                Check(
                    "flashinfer_version",
                    "ok",
                    f"matches vLLM {ctx.vllm_version}'s pin {ctx.pin}",
                    details,
                )
            )
        else:
            checks.append(
                Check(
                    "flashinfer_version",
                    "warning",
                    (
                        f"flashinfer-python {ctx.fi_version} installed, vLLM {ctx.vllm_version} pins "
                        f"{ctx.pin}: install flashinfer-python=={ctx.pin}"
                    ),
                    details,
                )
            )
    return checks


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _mm_fp4_check(ctx: _Context, fi_backend: str) -> Check:
    details: dict[str, Any] = {"backend": fi_backend, "compute_capability": ctx.cc_text}
    if ctx.cc is None:
        details["supported"] = None
        return Check(
            "mm_fp4_backend",
            "info",
            f"mm_fp4 backend {fi_backend!r} not checked: no compute capability known",
            details,
        )
    supported, source = probes.mm_fp4_supported(fi_backend, ctx.cc)
    details.update(supported=supported, source=source)
    if supported:
        return Check(
            "mm_fp4_backend",
            "ok",
            f"mm_fp4 backend {fi_backend!r} supports {ctx.cc_text} ({source})",
            details,
        )
    here = [b for b in gpus.MM_FP4_SUPPORT_TABLE if gpus.table_supports(b, ctx.cc)]
    if here:
        inverse = {v: k for k, v in gpus.FLASHINFER_LINEAR_BACKENDS.items()}
        todo = "use --linear-backend " + " or ".join(inverse[b] for b in here)
    else:
        todo = (
            "this GPU has no FP4 GEMM: use --policy migrate (Marlin below SM100) or "
            "--linear-backend marlin"
        )
    return Check(
        "mm_fp4_backend",
        ctx.severe(),
        (
            f"--linear-backend {ctx.linear}: FlashInfer mm_fp4 backend {fi_backend!r} does not "
            f"support compute capability {ctx.cc_text} ({source}); {todo}"
        ),
        details,
    )


def _linear_check(ctx: _Context) -> Check:
    """Non-FlashInfer backends: CUTLASS needs native FP4, Marlin needs 7.5+."""
    details = {"backend": ctx.linear, "compute_capability": ctx.cc_text}
    needs_native = ctx.linear == "cutlass" and ctx.family not in ("sm100", "sm120", "none")
    no_marlin = ctx.linear == "marlin" and ctx.family == "unsupported"
    if needs_native or no_marlin:
        falls_back = _at_least(ctx.vllm_version, "0.28")
        severity: Severity = "warning" if falls_back else ctx.severe()
        then = (
            "vLLM falls back to another kernel with a warning"
            if falls_back
            else "vLLM fails at start-up"
        )
        return Check(
            "linear_backend",
            severity,
            (
                f"--linear-backend {ctx.linear} has no NVFP4 kernel on compute capability "
                f"{ctx.cc_text} ({then}); use --policy migrate or another backend"
            ),
            details,
        )
    if ctx.linear == "emulation":
        return Check("linear_backend", "info", "emulation backend: correct but slow", details)
    return Check(
        "linear_backend", "ok", f"--linear-backend {ctx.linear} needs no FlashInfer", details
    )


def _at_least(version: str, floor: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) >= Version(floor)
    except InvalidVersion:
        return False


def _moe_check(ctx: _Context) -> Check:
    families = gpus.FLASHINFER_MOE_FAMILIES[ctx.moe or ""]
    details = {"backend": ctx.moe, "families": sorted(families)}
    if ctx.family == "none" or ctx.family in families:
        return Check(
            "moe_backend",
            "ok" if ctx.family != "none" else "info",
            f"--moe-backend {ctx.moe} on {gpus.FAMILY_LABEL[ctx.family]}",
            details,
        )
    return Check(
        "moe_backend",
        ctx.severe(),
        (
            f"--moe-backend {ctx.moe} runs NVFP4 MoE only on {'/'.join(sorted(families))}; "
            f"compute capability {ctx.cc_text}: vLLM raises ValueError loading an NVFP4 MoE "
            "model; use --moe-backend marlin or auto"
        ),
        details,
    )


def _self_test_check(ctx: _Context, probe: CudaProbe) -> Check:
    try:
        from proxy.launcher.selftest import run_self_test
    except Exception as exc:  # noqa: BLE001 - torch missing or broken
        return Check("self_test", "warning", f"self-test not run: torch not importable ({exc})")
    result = run_self_test(
        compute_capability=ctx.cc if probe.available else None, linear_backend=ctx.linear
    )
    details = {"result": result.to_json()}
    fig = result.figures
    if result.ok:
        shown = {k: round(v, 4) for k, v in fig.items()}
        return Check(
            "self_test",
            "ok",
            (
                f"{result.path} NVFP4 GEMM on {result.device} within bounds {shown}; vLLM will "
                f"use: {result.vllm_kernel}"
            ),
            details,
        )
    severity: Severity = ctx.severe() if result.path == "flashinfer" else "warning"
    return Check(
        "self_test",
        severity,
        (f"{result.path} NVFP4 self-test on {result.device} failed: {'; '.join(result.errors)}"),
        details,
    )
