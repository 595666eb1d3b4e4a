"""`--kernels auto`: the NVFP4 kernel candidates a GPU and a vLLM release can run, each
as the settings that select it in that release, and why every other backend is left out.

Read from the launcher's tables only: which family runs which backend
(`capabilities.VLLM_LINEAR_FAMILIES`, `FLASHINFER_MOE_FAMILIES`, FlashInfer's mm_fp4
lists) and how a release spells the choice (`rules.MECHANISMS` through
`choose.mechanism_for`). Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import Version

from proxy.launcher import capabilities
from proxy.launcher.capabilities import FAMILY_NAME, Capability, Family
from proxy.launcher.choose import mechanism_for
from proxy.launcher.gpus import flashinfer_backend_name
from proxy.launcher.rules import CUTLASS_MOE_ON_SM110, Scope
from proxy.launcher.versions import in_range, planned_for

# The NVFP4 linear backends a race may try, in vLLM 0.34's automatic order (facts file).
LINEAR_BACKENDS = ("flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass",
                   "marlin", "flashinfer_trtllm", "flashinfer_cudnn")
# Linear backends a race never tries, and why.
LINEAR_NEVER = {
    "emulation": "dequantizes and multiplies in 16-bit: a debugging kernel, never a "
                 "candidate for speed",
    "fbgemm": "FBGEMM's NVFP4 GEMM: the launcher's tables hold no GPU facts for it",
}
MOE_BACKENDS = ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl",
                "marlin")
MOE_NEVER = {
    "triton": "no NVFP4 MoE kernel (vLLM raises ValueError)",
    "deep_gemm": "no NVFP4 MoE kernel (FP8 only)",
    "aiter": "AMD ROCm only",
}
AUTO = "auto"


@dataclass(frozen=True)
class KernelCandidate:
    """One candidate: its name, the backend per scope, and the settings that select it."""

    name: str
    scope: Scope | None  # None: vLLM's own choice (nothing set)
    backend: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""
    warning: str | None = None

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "scope": self.scope, "backend": self.backend,
                "args": list(self.args), "env": dict(self.env), "note": self.note,
                "warning": self.warning}


@dataclass(frozen=True)
class KernelPlan:
    """The candidates for one GPU and release, and each backend left out with its reason."""

    release: Version
    capability: Capability
    family: Family
    candidates: tuple[KernelCandidate, ...]
    left_out: tuple[tuple[str, str], ...] = field(default=())

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.candidates)

    def as_json(self) -> dict[str, object]:
        return {"vllm": str(self.release), "compute_capability": capabilities.text(self.capability),
                "family": self.family, "candidates": [c.as_json() for c in self.candidates],
                "left_out": [{"backend": b, "reason": r} for b, r in self.left_out]}


def _family_reason(backend: str, needs: frozenset[Family], family: Family) -> str:
    wanted = "/".join(sorted(needs))
    return f"{backend}: needs family {wanted}, this GPU is {family} ({FAMILY_NAME[family]})"


def _linear_gpu_reason(backend: str, cc: Capability, family: Family) -> str | None:
    """Why this GPU cannot run `backend` (None: it can)."""
    needs = capabilities.VLLM_LINEAR_FAMILIES[backend]
    if family not in needs:
        return _family_reason(backend, needs, family)
    fi_backend = flashinfer_backend_name(backend)
    if fi_backend is not None and not capabilities.mm_fp4_supports(fi_backend, cc):
        return (f"{backend}: FlashInfer {capabilities.FLASHINFER_TABLE_VERSION}'s mm_fp4 "
                f"backend {fi_backend!r} does not list compute capability "
                f"{capabilities.text(cc)}")
    return None


def _moe_gpu_reason(backend: str, family: Family, release: Version) -> str | None:
    if backend == "marlin":
        needs: frozenset[Family] = capabilities.VLLM_LINEAR_FAMILIES["marlin"]
    elif backend == "cutlass":
        sm110 = in_range(release, CUTLASS_MOE_ON_SM110)
        needs = frozenset({"sm100", "sm120", *(("sm110",) if sm110 else ())})
        if family == "sm110" and not sm110:
            return (f"moe:{backend}: vLLM {release} no longer runs its CUTLASS NVFP4 MoE on "
                    f"{FAMILY_NAME['sm110']} (the grouped kernel is SM100-only)")
    else:
        needs = capabilities.FLASHINFER_MOE_FAMILIES[backend]
    return None if family in needs else _family_reason(f"moe:{backend}", needs, family)


def _candidate(scope: Scope, backend: str, release: Version, name: str
               ) -> KernelCandidate | str:
    """The candidate in `release`'s form, or why the release cannot select it."""
    found = mechanism_for(scope, backend, release)
    if found is None:
        return f"{name}: vLLM {release} has no way to select it"
    mech, spelled = found
    args: list[str] = []
    env: list[tuple[str, str]] = []
    for kind, setting, template in mech.outputs:
        value = template.replace("{value}", spelled)
        if kind == "flag":
            args += [setting, value]
        else:
            env.append((setting, value))
    return KernelCandidate(name, scope, backend, tuple(args), tuple(env), mech.note,
                           mech.warning)


def auto_candidates(vllm_version: Version, cc: Capability, moe: bool = False) -> KernelPlan:
    """The candidates `--kernels auto` races for this release and GPU: vLLM's own choice,
    every NVFP4 linear backend the GPU and release can run (and, with `moe`, every NVFP4
    MoE backend, the linear one left to vLLM)."""
    release = planned_for(vllm_version)
    family = capabilities.family_of(cc)
    candidates = [KernelCandidate(AUTO, None, AUTO, note="vLLM's own choice: no kernel setting")]
    left_out = [(b, f"{b}: {why}") for b, why in LINEAR_NEVER.items()]
    tries: list[tuple[Scope, str, str, str | None]] = [
        ("linear", b, b, _linear_gpu_reason(b, cc, family)) for b in LINEAR_BACKENDS]
    if moe:
        left_out += [(f"moe:{b}", f"moe:{b}: {why}") for b, why in MOE_NEVER.items()]
        tries += [("moe", b, f"moe:{b}", _moe_gpu_reason(b, family, release))
                  for b in MOE_BACKENDS]
    for scope, backend, name, reason in tries:
        made = _candidate(scope, backend, release, name) if reason is None else reason
        if isinstance(made, str):
            left_out.append((name, made))
        else:
            candidates.append(made)
    return KernelPlan(release, cc, family, tuple(candidates), tuple(left_out))
