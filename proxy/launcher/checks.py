"""The individual preflight checks: each takes the facts found on this host and
returns a `Check` (severity, one human sentence, details). Pure except the FlashInfer
query and the self-test, which `run_preflight` decides to run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from packaging.specifiers import SpecifierSet

from proxy.launcher import capabilities, gpus, probes
from proxy.launcher.capabilities import Family
from proxy.launcher.probes import CudaProbe
from proxy.launcher.rules import CUTLASS_MOE_ON_SM110, LINEAR_BACKEND_FALLS_BACK
from proxy.launcher.versions import VersionError, in_range, parse_version

Severity = Literal["ok", "info", "warning", "fatal"]


@dataclass(frozen=True)
class Check:
    """One finding; `fatal` stops the launcher before vLLM is started."""

    name: str  # "cuda", "compute_capability", "flashinfer", "flashinfer_version", "mm_fp4_backend", "linear_backend", "moe_backend", "self_test"
    severity: Severity
    message: str  # one human sentence
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """The facts every check reads: target vLLM, capability, chosen backends, FlashInfer."""

    vllm_version: str
    cc: tuple[int, int] | None
    family: Family
    linear: str | None
    moe: str | None
    enforce: bool  # a CUDA device is here: paths that cannot work are fatal
    fi_version: str | None
    pin: str | None
    fi_local: bool = True  # vLLM's FlashInfer is importable here (same interpreter)

    @property
    def cc_text(self) -> str:
        return cc_text(self.cc)

    def severe(self) -> Severity:
        return "fatal" if self.enforce else "warning"

    def install_hint(self) -> str:
        return f"flashinfer-python=={self.pin}" if self.pin else "flashinfer-python"


cc_text = capabilities.text


def cuda_check(probe: CudaProbe, given: tuple[int, int] | None) -> Check:
    details = asdict(probe)
    if probe.available:
        msg = f"CUDA device 0: {probe.device_name}, compute capability {cc_text(probe.capability)}"
        if given is not None and probe.capability != given:
            return Check(
                "cuda",
                "warning",
                f"{msg}, but {cc_text(given)} was given: checks use the given one",
                details,
            )
        return Check("cuda", "ok", f"{msg} (via {probe.source})", details)
    msg = "no CUDA device: FP4 GEMM settings have no effect on this host"
    if probe.error:
        msg += f" ({probe.error})"
    if given is not None:
        msg += f"; checks below are for the given compute capability {cc_text(given)}"
    return Check("cuda", "info", msg, details)


def capability_check(ctx: Context) -> Check:
    details = {"compute_capability": ctx.cc_text, "family": ctx.family}
    label = capabilities.FAMILY_LABEL[ctx.family]
    if ctx.cc is None:
        return Check(
            "compute_capability", "info", "none known (no CUDA device, none given)", details
        )
    text = f"{ctx.cc_text}: {label}"
    if ctx.family in capabilities.NATIVE_FP4:
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


def flashinfer_checks(ctx: Context) -> list[Check]:
    needed_by = [
        f"--linear-backend {ctx.linear}" if gpus.flashinfer_backend_name(ctx.linear) else "",
        f"--moe-backend {ctx.moe}" if ctx.moe in capabilities.FLASHINFER_MOE_FAMILIES else "",
    ]
    needed = " and ".join(n for n in needed_by if n)
    details = {"version": ctx.fi_version, "pin": ctx.pin, "needed_by": needed or None}
    name = "flashinfer"
    if ctx.fi_version is not None:
        checks = [Check(name, "ok", f"flashinfer-python {ctx.fi_version} installed", details)]
    elif needed and ctx.family in capabilities.NATIVE_FP4:
        checks = [Check(name, ctx.severe(), (
            f"FlashInfer is not installed but {needed} needs it: install {ctx.install_hint()} "
            "(the version vLLM pins), or choose a backend without FlashInfer (--policy "
            "preserve keeps vLLM's CUTLASS kernel, or --linear-backend cutlass)"), details)]
    elif needed:
        checks = [Check(name, "warning", f"FlashInfer is not installed (wanted by {needed})",
                        details)]
    else:
        checks = [Check(name, "info", "FlashInfer is not installed (the chosen backends do "
                        "not need it)", details)]
    name = "flashinfer_version"
    if ctx.pin is None:
        checks.append(Check(name, "info", f"no known FlashInfer pin for vLLM {ctx.vllm_version} "
                            f"(known: {gpus.known_pins()})", details))
    elif ctx.fi_version is not None and _same_version(ctx.fi_version, ctx.pin):
        checks.append(Check(name, "ok", f"matches vLLM {ctx.vllm_version}'s pin {ctx.pin}",
                            details))
    elif ctx.fi_version is not None:
        checks.append(Check(name, "warning", (
            f"flashinfer-python {ctx.fi_version} installed, vLLM {ctx.vllm_version} pins "
            f"{ctx.pin}: install flashinfer-python=={ctx.pin}"), details))
    return checks


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def mm_fp4_check(ctx: Context, fi_backend: str) -> Check:
    details: dict[str, Any] = {"backend": fi_backend, "compute_capability": ctx.cc_text}
    if ctx.cc is None:
        details["supported"] = None
        return Check(
            "mm_fp4_backend",
            "info",
            f"mm_fp4 backend {fi_backend!r} not checked: no compute capability known",
            details,
        )
    # FlashInfer itself is asked only about a GPU that is here and only if installed.
    ask = ctx.enforce and ctx.fi_local and ctx.fi_version is not None
    supported, source = probes.mm_fp4_supported(fi_backend, ctx.cc, ask_flashinfer=ask)
    details.update(supported=supported, source=source)
    if supported:
        return Check(
            "mm_fp4_backend",
            "ok",
            f"mm_fp4 backend {fi_backend!r} supports {ctx.cc_text} ({source})",
            details,
        )
    here = [b for b in capabilities.MM_FP4_SUPPORT if capabilities.mm_fp4_supports(b, ctx.cc)]
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


def linear_check(ctx: Context) -> Check:
    """Non-FlashInfer backends: CUTLASS needs native FP4, Marlin needs 7.5+."""
    details = {"backend": ctx.linear, "compute_capability": ctx.cc_text}
    needs_native = (ctx.linear == "cutlass" and ctx.cc is not None
                    and ctx.family not in capabilities.NATIVE_FP4)
    no_marlin = ctx.linear == "marlin" and ctx.family == "unsupported"
    if needs_native or no_marlin:
        falls_back = _within(ctx.vllm_version, LINEAR_BACKEND_FALLS_BACK)
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


def _within(version: str, releases: SpecifierSet) -> bool:
    try:
        return in_range(parse_version(version), releases)
    except VersionError:
        return False


def moe_check(ctx: Context) -> Check:
    families = capabilities.FLASHINFER_MOE_FAMILIES[ctx.moe or ""]
    details = {"backend": ctx.moe, "families": sorted(families)}
    if ctx.cc is None:
        return Check("moe_backend", "info", f"--moe-backend {ctx.moe}: no GPU known", details)
    if ctx.family in families:
        return Check(
            "moe_backend", "ok",
            f"--moe-backend {ctx.moe} on {capabilities.FAMILY_LABEL[ctx.family]}", details,
        )
    cutlass_runs = ctx.family in capabilities.NATIVE_FP4 and (
        ctx.family != "sm110" or _within(ctx.vllm_version, CUTLASS_MOE_ON_SM110))
    instead = "cutlass" if cutlass_runs else "marlin"
    return Check(
        "moe_backend",
        ctx.severe(),
        (
            f"--moe-backend {ctx.moe} runs NVFP4 MoE only on {'/'.join(sorted(families))}; "
            f"compute capability {ctx.cc_text}: vLLM raises ValueError loading an NVFP4 MoE "
            f"model; use --moe-backend {instead} or auto"
        ),
        details,
    )


def self_test_check(ctx: Context, probe: CudaProbe) -> Check:
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
