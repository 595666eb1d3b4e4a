"""The versioned translation table for vLLM's FP4 settings, as data.

Three small tables, read together by `proxy.launcher.translate` and `proxy.launcher.choose`:
- SOURCES: what is matched (a flag, an env var or a `--config` key, and its value), in which
  vLLM versions vLLM honours it, and which backend it asks for (the *intent*).
- MECHANISMS: how a backend is selected in a given vLLM version, in order of preference.
- CHOICES: which backend each policy picks per GPU family (and target release), and for
  which asked backends.
Facts come from the shared VLLM_FP4_FACTS notes (the releases `proxy.launcher.releases`
names) and vLLM 0.32's sources (its NVFP4 MoE backend oracle, for the FlashInfer opt-out;
0.34's MoE experts for where vLLM's CUTLASS MoE runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.specifiers import SpecifierSet

from proxy.launcher.capabilities import FAMILY_NAME, Family

SettingKind = Literal["flag", "env", "config"]
Scope = Literal["linear", "moe", "quantization"]
Policy = Literal["migrate", "preserve"]
Normalize = Literal["backend", "exact", "bool"]

NEVER = SpecifierSet("<0.0.0")  # no vLLM release honours it
ALWAYS = SpecifierSet(">=0.0.0")
AUTO = "auto"  # "let vLLM pick": nothing is emitted
DROP = "drop"  # intent of a setting that must simply go (`--quantization nvfp4`)
FROM_COMPANION = "@companion"  # intent read from the companion env var's value
NOT_FLASHINFER = "!flashinfer"  # an opt-out: any MoE kernel but FlashInfer's


@dataclass(frozen=True)
class Source:
    """An old or current way of asking for an FP4 kernel. Flag rules also match config keys."""

    kind: Literal["flag", "env"]
    name: str
    scope: Scope
    accepted: SpecifierSet  # vLLM releases that honour it
    about: str  # why it is (or will be) wrong, for the reason text
    # Higher wins: new-style over old, a command-line flag over an env var of the same age.
    rank: int
    values: tuple[tuple[str, str | None], ...] | None = None  # None: any value, passed through
    normalize: Normalize = "backend"
    deprecated: SpecifierSet = NEVER  # honoured but deprecated: translate anyway
    strict: bool = False  # an unknown value is an error instead of "not matched"
    aliases: tuple[str, ...] = ()
    json_path: tuple[str, ...] = ()  # where the backend sits inside a JSON value
    companion: str | None = None
    companion_values: tuple[tuple[str, str | None], ...] = ()
    companion_default: str | None = None
    off_note: str = ""  # why dropping a value that asks for nothing (`=0`) changes no kernel


@dataclass(frozen=True)
class BackendValue:
    """How a mechanism spells `backend`, and in which releases it may."""

    backend: str
    value: str
    versions: SpecifierSet = ALWAYS


@dataclass(frozen=True)
class Mechanism:
    """One way to select a backend in a range of releases; `outputs` are (kind, name, template)
    with `{value}` replaced by the backend's spelling. No outputs: the release's default."""

    scope: Scope
    versions: SpecifierSet
    outputs: tuple[tuple[Literal["flag", "env"], str, str], ...]
    values: tuple[BackendValue, ...]
    note: str
    warning: str | None = None


@dataclass(frozen=True)
class Choice:
    """Which backends a policy tries, in order, for GPU families ("*" matches any). A
    FlashInfer candidate whose mm_fp4 does not list the GPU's capability is skipped."""

    policy: Policy | Literal["*"]
    families: tuple[Family, ...] | Literal["*"]
    scope: Scope
    candidates: tuple[str, ...]  # "{requested}" stands for the backend the old setting asked
    reason: str
    warning: str | None = None
    # The asked backends this row is for (None: any). `migrate` moves only the CUTLASS GEMM.
    applies_to: tuple[str, ...] | None = None
    versions: SpecifierSet = ALWAYS  # the target releases this row is for


def _same(*names: str) -> tuple[tuple[str, str | None], ...]:
    return tuple((n, n) for n in names)


_BOOL_OFF = ("0", None)
_REMOVED_024 = "removed in vLLM 0.24 (deprecated from 0.22)"
# vLLM 0.32 tries these NVFP4 GEMMs only after Marlin, which runs on every GPU from SM75.
_ONLY_WHEN_ASKED = "=0 is the default and vLLM runs {} only when asked, so no kernel changes"

SOURCES: tuple[Source, ...] = (
    Source(
        "flag", "--fp4-gemm-backend", "linear", NEVER, rank=4, strict=True,
        about="SGLang's server flag: no vLLM release parses it (exit 2, unrecognized arguments)",
        values=_same("auto", "flashinfer_cutlass", "flashinfer_cudnn", "flashinfer_trtllm", "cutlass"),
    ),
    Source(
        "env", "VLLM_USE_TRTLLM_FP4_GEMM", "linear", SpecifierSet(">=0.10.1,<0.11.1"), rank=1,
        about="VLLM_USE_TRTLLM_FP4_GEMM exists only in vLLM 0.10.1-0.11.0",
        values=(("1", "flashinfer_trtllm"), _BOOL_OFF), normalize="bool", strict=True,
        off_note=_ONLY_WHEN_ASKED.format("FlashInfer's TRT-LLM FP4 GEMM"),
    ),
    Source(
        "env", "VLLM_USE_NVFP4_CT_EMULATIONS", "linear", SpecifierSet("<0.24"), rank=2,
        deprecated=SpecifierSet(">=0.22"), about=f"VLLM_USE_NVFP4_CT_EMULATIONS was {_REMOVED_024}",
        values=(("1", "emulation"), _BOOL_OFF), normalize="bool", strict=True,
        off_note=_ONLY_WHEN_ASKED.format("the NVFP4 emulation"),
    ),
    Source(
        "env", "VLLM_USE_FBGEMM", "linear", SpecifierSet(">=0.11.0,<0.24"), rank=2,
        deprecated=SpecifierSet(">=0.22"),
        about=f"VLLM_USE_FBGEMM exists from vLLM 0.11.0 and was {_REMOVED_024}",
        values=(("1", "fbgemm"), _BOOL_OFF), normalize="bool", strict=True,
        off_note=_ONLY_WHEN_ASKED.format("FBGEMM's NVFP4 GEMM"),
    ),
    Source(
        "env", "VLLM_NVFP4_GEMM_BACKEND", "linear", SpecifierSet(">=0.11.1,<0.24"), rank=3,
        deprecated=SpecifierSet(">=0.22"), normalize="exact", strict=True,
        about=f"VLLM_NVFP4_GEMM_BACKEND exists from vLLM 0.11.1 and was {_REMOVED_024}",
        values=(
            ("flashinfer-cudnn", "flashinfer_cudnn"), ("flashinfer-trtllm", "flashinfer_trtllm"),
            ("flashinfer-cutlass", "flashinfer_cutlass"), ("cutlass", "cutlass"),
            ("marlin", "marlin"), ("emulation", "emulation"), ("flashinfer-b12x", "flashinfer_b12x"),
        ),
    ),
    Source(
        "flag", "--linear-backend", "linear", SpecifierSet(">=0.22"), rank=5,
        about="--linear-backend exists from vLLM 0.22",
    ),
    Source(
        "flag", "--kernel-config", "linear", SpecifierSet(">=0.30"), rank=6,
        about="--kernel-config linear_backend_per_quant exists from vLLM 0.30",
        json_path=("linear_backend_per_quant", "nvfp4_w4a4"),
    ),
    Source(
        "flag", "--moe-runner-backend", "moe", NEVER, rank=3, strict=True,
        about="SGLang's MoE flag: vLLM's sibling is --moe-backend (from 0.17)",
        values=_same(
            "auto", "triton", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl",
            "cutlass", "deep_gemm", "marlin",
        ) + (("triton_kernel", "triton"), ("flashinfer_mxfp4", AUTO)),
    ),
    Source(
        "env", "VLLM_FLASHINFER_MOE_BACKEND", "moe", SpecifierSet(">=0.10.1,<0.24"), rank=1,
        deprecated=SpecifierSet(">=0.22"),
        about=f"VLLM_FLASHINFER_MOE_BACKEND exists from vLLM 0.10.1 and was {_REMOVED_024}",
        values=(("throughput", None), ("latency", None), ("masked_gemm", None)), normalize="exact",
        off_note="it only picked among FlashInfer MoE kernels for VLLM_USE_FLASHINFER_MOE_FP4=1",
    ),
    Source(
        "env", "VLLM_USE_FLASHINFER_MOE_FP4", "moe", SpecifierSet("<0.24"), rank=2,
        deprecated=SpecifierSet(">=0.22"), normalize="bool", strict=True,
        about=f"VLLM_USE_FLASHINFER_MOE_FP4 was {_REMOVED_024}",
        values=(("1", FROM_COMPANION), ("0", NOT_FLASHINFER)),
        companion="VLLM_FLASHINFER_MOE_BACKEND",
        companion_values=(
            ("throughput", "flashinfer_cutlass"), ("latency", "flashinfer_trtllm"),
            ("masked_gemm", "flashinfer_cutedsl"),
        ),
        # Its default moved from throughput to latency across releases: leave it to vLLM.
        companion_default=AUTO,
    ),
    Source(
        "flag", "--moe-backend", "moe", SpecifierSet(">=0.17"), rank=5,
        about="--moe-backend exists from vLLM 0.17",
    ),
    Source(
        "flag", "--quantization", "quantization", NEVER, rank=0, aliases=("-q",),
        about="vLLM has no quantization method 'nvfp4' (Unknown quantization method: nvfp4, exit 1)",
        values=(("nvfp4", DROP),),
    ),
)

_NVFP4_LINEAR = ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cudnn",
                 "marlin", "fbgemm", "emulation")
_LINEAR_FLAG_VALUES = tuple(BackendValue(b, b) for b in _NVFP4_LINEAR) + (
    BackendValue("flashinfer_cutedsl", "flashinfer_cutedsl", SpecifierSet(">=0.24")),
    # Listed from 0.24, but the NVFP4 kernel only works from 0.28.
    BackendValue("flashinfer_b12x", "flashinfer_b12x", SpecifierSet(">=0.28")),
)
# From here a --linear-backend without a kernel for some layer type falls back with a
# warning; from 0.22 until then it fails start-up (the preflight reads this too).
_FALLBACK_FROM = "0.28"
LINEAR_BACKEND_FALLS_BACK = SpecifierSet(f">={_FALLBACK_FROM}")
_ALL_LAYERS = ("--linear-backend applies to ALL quantized linear layers, not only NVFP4")

MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism(
        "linear", SpecifierSet(">=0.30"),
        (("flag", "--kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a4": "{value}"}}'),),
        _LINEAR_FLAG_VALUES,
        note="NVFP4-only scope via --kernel-config linear_backend_per_quant "
        "(--linear-backend would hit every quantized linear layer)",
    ),
    Mechanism(
        "linear", SpecifierSet(f">=0.22,<{_FALLBACK_FROM}"),
        (("flag", "--linear-backend", "{value}"),),
        _LINEAR_FLAG_VALUES, note="--linear-backend selects the kernel in vLLM 0.22-0.27",
        warning=f"{_ALL_LAYERS}; in vLLM 0.22-0.27 a backend without a kernel for some "
        "quantized layer type fails start-up",
    ),
    Mechanism(
        "linear", LINEAR_BACKEND_FALLS_BACK, (("flag", "--linear-backend", "{value}"),),
        _LINEAR_FLAG_VALUES, note="--linear-backend selects the kernel in vLLM 0.28-0.29",
        warning=f"{_ALL_LAYERS}; other layer types fall back with a warning",
    ),
    Mechanism(
        "linear", SpecifierSet(">=0.11.1,<0.24"), (("env", "VLLM_NVFP4_GEMM_BACKEND", "{value}"),),
        (
            BackendValue("flashinfer_cudnn", "flashinfer-cudnn"),
            BackendValue("flashinfer_trtllm", "flashinfer-trtllm"),
            BackendValue("flashinfer_cutlass", "flashinfer-cutlass"),
            BackendValue("cutlass", "cutlass"),
            BackendValue("marlin", "marlin", SpecifierSet(">=0.15")),
            BackendValue("emulation", "emulation", SpecifierSet(">=0.20")),
            BackendValue("flashinfer_b12x", "flashinfer-b12x", SpecifierSet(">=0.22")),
        ),
        note="VLLM_NVFP4_GEMM_BACKEND selects the kernel in vLLM 0.11.1-0.23",
    ),
    Mechanism(
        "linear", SpecifierSet(">=0.11.0,<0.24"), (("env", "VLLM_USE_FBGEMM", "1"),),
        (BackendValue("fbgemm", "1"),), note="VLLM_USE_FBGEMM=1 selects FBGEMM in vLLM 0.11-0.23",
    ),
    Mechanism(
        "linear", SpecifierSet("<0.24"), (("env", "VLLM_USE_NVFP4_CT_EMULATIONS", "1"),),
        (BackendValue("emulation", "1"),),
        note="VLLM_USE_NVFP4_CT_EMULATIONS=1 emulates NVFP4 (compressed-tensors checkpoints)",
    ),
    Mechanism(
        "linear", SpecifierSet(">=0.10.1,<0.11.1"), (("env", "VLLM_USE_TRTLLM_FP4_GEMM", "1"),),
        (BackendValue("flashinfer_trtllm", "1"),),
        note="VLLM_USE_TRTLLM_FP4_GEMM=1 is the only kernel knob in vLLM 0.10.1-0.11.0",
    ),
    Mechanism(
        "linear", SpecifierSet(">=0.10.1,<0.11.1"), (), (BackendValue("flashinfer_cutlass", ""),),
        note="FlashInfer CUTLASS is vLLM 0.10.1-0.11.0's default when FlashInfer is installed",
    ),
    Mechanism(
        "moe", SpecifierSet(">=0.17"), (("flag", "--moe-backend", "{value}"),),
        tuple(BackendValue(b, b) for b in (
            "auto", "triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass",
            "flashinfer_cutedsl", "marlin", "aiter")),
        note="--moe-backend selects the MoE kernel from vLLM 0.17",
    ),
    Mechanism(
        "moe", SpecifierSet(">=0.10.1,<0.17"),
        (("env", "VLLM_USE_FLASHINFER_MOE_FP4", "1"), ("env", "VLLM_FLASHINFER_MOE_BACKEND", "{value}")),
        (BackendValue("flashinfer_cutlass", "throughput"), BackendValue("flashinfer_trtllm", "latency")),
        note="VLLM_USE_FLASHINFER_MOE_FP4 with VLLM_FLASHINFER_MOE_BACKEND before --moe-backend",
    ),
    Mechanism(
        "moe", SpecifierSet("<0.10.1"), (("env", "VLLM_USE_FLASHINFER_MOE_FP4", "1"),),
        (BackendValue("flashinfer_cutlass", "1"),),
        note="VLLM_USE_FLASHINFER_MOE_FP4=1 (FlashInfer CUTLASS) is vLLM 0.10.0's only MoE knob",
    ),
)

_CUTLASS = ("cutlass",)
_OPT_OUT = (NOT_FLASHINFER,)
_GUIDE = "migrate: the upgrade moved the NVFP4 GEMM off vLLM's CUTLASS kernel, the guide says"
_NO_FLASHINFER_MOE = ("an opt-out of FlashInfer's MoE kernels keeps FlashInfer out under "
                      "every policy (--moe-backend auto may pick it: vLLM 0.32 tries it first)")

_SM100, _SM110, _SM120 = (FAMILY_NAME[f] for f in ("sm100", "sm110", "sm120"))
_OLD_GPU = (f"{FAMILY_NAME['unsupported']} GPUs (before compute capability 7.5) have no NVFP4 "
            "kernel in vLLM at all: Marlin needs 7.5")
# vLLM's CUTLASS NVFP4 MoE (CutlassExpertsFp4) runs on SM100 and SM120 families, and on SM110
# until 0.33: 0.34 dropped SM110 ("grouped NVFP4 kernel is sm100-only").
CUTLASS_MOE_ON_SM110 = SpecifierSet("<0.34")
_NO_CUTLASS_MOE_ON_SM110 = SpecifierSet(">=0.34")
_NATIVE_MOE = "vLLM's CUTLASS MoE, which runs on this native-FP4 GPU family, as the old release ran"
_THOR_MOE = (f"vLLM's CUTLASS MoE, as the old release ran on {_SM110} (vLLM 0.34 drops it "
             "there)")
_THOR_MARLIN = (f"Marlin: vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE on {_SM110} (the "
                "grouped kernel is SM100-only), and Marlin is what it picks there itself")

CHOICES: tuple[Choice, ...] = (
    Choice("migrate", ("sm100",), "linear", ("flashinfer_cutedsl", "flashinfer_cutlass"),
           f"{_GUIDE} FlashInfer CuTe-DSL on {_SM100} GPUs (vLLM 0.24+), else FlashInfer "
           "CUTLASS", applies_to=_CUTLASS),
    Choice("migrate", ("sm110",), "linear", ("flashinfer_cutlass", "cutlass"),
           f"{_GUIDE} FlashInfer CUTLASS on {_SM110} (no CuTe-DSL FP4 GEMM there; vLLM's "
           "CUTLASS where FlashInfer lists no FP4 GEMM for the capability)",
           applies_to=_CUTLASS),
    Choice("migrate", ("sm120",), "linear", ("flashinfer_cutlass",),
           f"{_GUIDE} FlashInfer CUTLASS on {_SM120} GPUs", applies_to=_CUTLASS),
    Choice("migrate", ("marlin",), "linear", ("marlin", AUTO),
           f"{_GUIDE} Marlin weight-only W4A16 {FAMILY_NAME['marlin']} (no native FP4 GEMM; "
           "vLLM falls back to it by itself where it has no Marlin knob)", applies_to=_CUTLASS),
    Choice("migrate", ("unsupported",), "linear", ("marlin", AUTO),
           f"{_GUIDE} Marlin, the nearest; but {_OLD_GPU}", applies_to=_CUTLASS),
    Choice("migrate", ("unknown",), "linear", ("flashinfer_cutlass",),
           f"{_GUIDE} FlashInfer CUTLASS ({_SM100}, {_SM110} and {_SM120}); compute "
           "capability unknown",
           warning="compute capability unknown (no GPU seen, none given): picked "
           "flashinfer_cutlass; give --compute-capability to pick per GPU family",
           applies_to=_CUTLASS),
    Choice("*", "*", "linear", ("{requested}",),
           "an explicit choice keeps its meaning under every policy"),
    # `triton` is no NVFP4 MoE backend (vLLM raises ValueError), so it is never picked.
    Choice("*", ("sm100", "sm120"), "moe", _CUTLASS,
           f"{_NO_FLASHINFER_MOE}; {_NATIVE_MOE}", applies_to=_OPT_OUT),
    Choice("*", ("sm110",), "moe", _CUTLASS, f"{_NO_FLASHINFER_MOE}; {_THOR_MOE}",
           applies_to=_OPT_OUT, versions=CUTLASS_MOE_ON_SM110),
    Choice("*", ("sm110",), "moe", ("marlin",), f"{_NO_FLASHINFER_MOE}; {_THOR_MARLIN}",
           applies_to=_OPT_OUT),
    Choice("*", ("marlin",), "moe", ("marlin",), f"{_NO_FLASHINFER_MOE}; Marlin "
           f"{FAMILY_NAME['marlin']}, as the old release ran", applies_to=_OPT_OUT),
    Choice("*", ("unsupported",), "moe", ("marlin",), f"{_NO_FLASHINFER_MOE}; Marlin, the "
           f"nearest; but {_OLD_GPU}", applies_to=_OPT_OUT),
    Choice("*", ("unknown",), "moe", _CUTLASS, f"{_NO_FLASHINFER_MOE}; vLLM's CUTLASS MoE "
           f"({_SM100} and {_SM120}; {_SM110} before vLLM 0.34)", applies_to=_OPT_OUT,
           warning="compute capability unknown (no GPU seen, none given): picked --moe-backend "
           "cutlass, which needs an SM100 or SM120-family GPU (also SM110 before vLLM 0.34; "
           "marlin elsewhere); give --compute-capability to pick per GPU family"),
    Choice("*", ("sm110",), "moe", ("{requested}",), "the nearest equivalent of the MoE kernel "
           "asked", applies_to=_CUTLASS, versions=_NO_CUTLASS_MOE_ON_SM110,
           warning=f"vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE on {_SM110}: loading an "
           "NVFP4 MoE model fails with this choice; --moe-backend marlin runs there"),
    Choice("*", "*", "moe", ("{requested}",), "the nearest equivalent of the MoE kernel asked"),
)
