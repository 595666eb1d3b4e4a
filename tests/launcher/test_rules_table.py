"""The whole rule table, cell by cell: every removed or renamed setting x every value x every
target release x GPU family x policy, run through the launcher's planner. The kernel the old
release ran is the one the new command asks for, except in the cells EXCEPTIONS names, each
with its reason and with what the translation must show there instead."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from proxy.launcher.command import Command
from proxy.launcher.planner import plan_launch
from proxy.launcher.rules import SOURCES
from proxy.launcher.translate import Change

RELEASES = [Version(v) for v in ("0.10.0", "0.10.1", "0.11.0", "0.11.1")] + [
    Version(f"0.{minor}.0") for minor in range(12, 35)]
FAMILIES = {"sm100": (10, 0), "sm110": (11, 0), "thor_cuda12": (10, 1), "sm120": (12, 1),
            "below_sm100": (9, 0), "unknown": None}
DEFAULT = "(vLLM's own choice)"
NOT_FI = "(not FlashInfer)"
FLASHINFER = "(a FlashInfer MoE kernel)"
# vLLM's NVFP4 MoE without FlashInfer: its CUTLASS kernel on native FP4 GPUs, Marlin below.
NON_FI_MOE = {"sm100": "cutlass", "sm110": "cutlass", "thor_cuda12": "cutlass", "sm120": "cutlass",
              "below_sm100": "marlin", "unknown": "cutlass"}
Env = tuple[tuple[str, str], ...]

# What each old setting made vLLM (SGLang, for its flags) run: the facts' old -> new mapping.
LINEAR_OLD = {
    ("--fp4-gemm-backend", "auto"): DEFAULT,
    **{("--fp4-gemm-backend", v): v for v in
       ("flashinfer_cutlass", "flashinfer_cudnn", "flashinfer_trtllm", "cutlass")},
    ("VLLM_USE_TRTLLM_FP4_GEMM", "1"): "flashinfer_trtllm",
    ("VLLM_USE_TRTLLM_FP4_GEMM", "0"): DEFAULT,
    ("VLLM_USE_NVFP4_CT_EMULATIONS", "1"): "emulation",
    ("VLLM_USE_NVFP4_CT_EMULATIONS", "0"): DEFAULT,
    ("VLLM_USE_FBGEMM", "1"): "fbgemm",
    ("VLLM_USE_FBGEMM", "0"): DEFAULT,
    **{("VLLM_NVFP4_GEMM_BACKEND", v): v.replace("-", "_") for v in
       ("flashinfer-cudnn", "flashinfer-trtllm", "flashinfer-cutlass", "cutlass", "marlin",
        "emulation", "flashinfer-b12x")},
}
MOE_OLD = {
    ("--moe-runner-backend", "auto"): DEFAULT,
    **{("--moe-runner-backend", v): v for v in
       ("triton", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl", "cutlass",
        "deep_gemm", "marlin")},
    ("--moe-runner-backend", "triton_kernel"): "triton",
    ("--moe-runner-backend", "flashinfer_mxfp4"): DEFAULT,  # SGLang's MXFP4 runner
    **{("VLLM_FLASHINFER_MOE_BACKEND", v): DEFAULT for v in
       ("throughput", "latency", "masked_gemm")},  # alone it selects nothing
    ("VLLM_USE_FLASHINFER_MOE_FP4", "1"): FLASHINFER,
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0"): NOT_FI,
}
PAIRS = {"throughput": "flashinfer_cutlass", "latency": "flashinfer_trtllm",
         "masked_gemm": "flashinfer_cutedsl"}


@dataclass(frozen=True)
class Cell:
    scope: str
    settings: Env  # (name, value): flags start with "--", the rest are env vars
    old: str
    target: Version
    family: str
    policy: str


@dataclass(frozen=True)
class Exception_:
    """Cells where the new command asks for another kernel, why, and what must show it."""

    reason: str
    applies: Callable[[Cell], bool]
    shows: str  # "guide": the upgrade guide's kernel; "manual": a manual-edit note;
    # "explained": a change says vLLM picks by itself or what the release reads instead;
    # "says:TEXT": a change's reason says TEXT


def _old(*kernels: str) -> Callable[[Cell], bool]:
    return lambda cell: cell.old in kernels


def _in(spec: str, test: Callable[[Cell], bool]) -> Callable[[Cell], bool]:
    return lambda cell: cell.target in SpecifierSet(spec) and test(cell)


EXCEPTIONS = [
    Exception_("migrate: the one change the upgrade guide asks for, the removed CUTLASS NVFP4 "
               "GEMM to FlashInfer (CuTe-DSL on SM100, CUTLASS on SM120), Marlin below SM100",
               lambda c: c.policy == "migrate" and c.scope == "linear" and c.old == "cutlass",
               "guide"),
    Exception_("vLLM 0.10.0 has no NVFP4 GEMM knob but the compressed-tensors emulation",
               _in("<0.10.1", lambda c: c.scope == "linear"), "manual"),
    Exception_("vLLM 0.10.1-0.11.0 can only ask for TRT-LLM (VLLM_USE_TRTLLM_FP4_GEMM=1)",
               _in(">=0.10.1,<0.11.1", _old("cutlass", "flashinfer_cudnn", "marlin")), "manual"),
    Exception_("FlashInfer CUTLASS is vLLM 0.10.1-0.11.0's default: nothing to write",
               _in(">=0.10.1,<0.11.1", _old("flashinfer_cutlass")), "explained"),
    Exception_("Marlin is a VLLM_NVFP4_GEMM_BACKEND value only from vLLM 0.15",
               _in("<0.15", _old("marlin")), "manual"),
    Exception_("FBGEMM has no knob before VLLM_USE_FBGEMM (vLLM 0.11.0)",
               _in("<0.11", _old("fbgemm")), "manual"),
    Exception_("FlashInfer b12x: a VLLM_NVFP4_GEMM_BACKEND value from 0.22, listed by "
               "--linear-backend from 0.24 but with a working NVFP4 kernel only from 0.28",
               lambda c: c.old == "flashinfer_b12x" and (
                   c.target < Version("0.22") or Version("0.24") <= c.target < Version("0.28")),
               "manual"),
    Exception_("vLLM 0.10.0 knows FlashInfer CUTLASS MoE only (no VLLM_FLASHINFER_MOE_BACKEND)",
               _in("<0.10.1", _old("flashinfer_trtllm", "flashinfer_cutedsl")), "explained"),
    Exception_("before --moe-backend (vLLM 0.17) only FlashInfer's MoE kernels can be asked for",
               _in("<0.17", _old("triton", "deep_gemm", "cutlass", "marlin",
                                 "flashinfer_cutedsl")), "manual"),
    Exception_("VLLM_USE_FLASHINFER_MOE_FP4=1 alone: the FlashInfer MoE kernel it ran by default "
               "moved between releases, so the choice is left to vLLM", _old(FLASHINFER),
               "explained"),
    Exception_("vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE on Thor (CutlassExpertsFp4 "
               "dropped family 110): a FlashInfer opt-out there gets Marlin, which 0.34 runs",
               _in(">=0.34", lambda c: c.family in ("sm110", "thor_cuda12") and c.old == NOT_FI),
               "says:vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE"),
]


def _cells() -> list[Cell]:
    cases: list[tuple[str, Env, str]] = [("linear", (k,), v) for k, v in LINEAR_OLD.items()]
    cases += [("moe", (k,), v) for k, v in MOE_OLD.items()]
    cases += [("moe", (("VLLM_USE_FLASHINFER_MOE_FP4", "1"), ("VLLM_FLASHINFER_MOE_BACKEND", m)),
               kernel) for m, kernel in PAIRS.items()]
    return [Cell(scope, settings, old, target, family, policy)
            for (scope, settings, old), target, family, policy
            in product(cases, RELEASES, FAMILIES, ("migrate", "preserve"))]


def _honoured(name: str, target: Version) -> bool:
    return any(s.name == name and target in s.accepted for s in SOURCES)


def _asks(scope: str, args: Sequence[str], env: Mapping[str, str], target: Version) -> str:
    """What the final command asks vLLM `target` for, read from its words and environment."""
    flags = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    read = {k: v for k, v in flags.items() if _honoured(k, target)}
    assert read == flags, f"flags vLLM {target} does not parse: {set(flags) - set(read)}"
    stale = [k for k in env if not _honoured(k, target)]
    assert not stale, f"variables vLLM {target} ignores: {stale}"
    if scope == "linear":
        if "--kernel-config" in flags:
            return str(json.loads(flags["--kernel-config"])["linear_backend_per_quant"]["nvfp4_w4a4"])
        if "--linear-backend" in flags:
            return flags["--linear-backend"]
        if "VLLM_NVFP4_GEMM_BACKEND" in env:
            return env["VLLM_NVFP4_GEMM_BACKEND"].replace("-", "_")
        for name, kernel in (("VLLM_USE_TRTLLM_FP4_GEMM", "flashinfer_trtllm"),
                             ("VLLM_USE_FBGEMM", "fbgemm"),
                             ("VLLM_USE_NVFP4_CT_EMULATIONS", "emulation")):
            if env.get(name) == "1":
                return kernel
        return DEFAULT
    if "--moe-backend" in flags:
        return flags["--moe-backend"]
    if env.get("VLLM_USE_FLASHINFER_MOE_FP4") == "0":
        return NOT_FI
    if env.get("VLLM_USE_FLASHINFER_MOE_FP4") == "1":
        if target < Version("0.10.1"):
            return "flashinfer_cutlass"
        mode = env.get("VLLM_FLASHINFER_MOE_BACKEND")
        return PAIRS[mode] if mode else FLASHINFER
    return DEFAULT


def _plan(cell: Cell) -> tuple[str, tuple[Change, ...]]:
    flags = [w for name, value in cell.settings if name.startswith("--") for w in (name, value)]
    env = {name: value for name, value in cell.settings if not name.startswith("--")}
    command = Command("serve", ("vllm", "serve"), ("m", *flags))
    plan = plan_launch(command, env, None, target=cell.target,
                       compute_capability=FAMILIES[cell.family], policy=cell.policy)  # type: ignore[arg-type]
    return _asks(cell.scope, plan.args[1:], plan.env, cell.target), plan.changes


def _shows(how: str, changes: Sequence[Change]) -> bool:
    if how.startswith("says:"):
        return any(how[len("says:"):] in (c.reason or "") for c in changes)
    if how == "manual":
        return any(c.manual for c in changes)
    if how == "guide":
        return any(c.reason and "migrate:" in c.reason for c in changes)
    return any(c.new is None and c.reason for c in changes)


def test_table_covers_every_removed_or_renamed_setting() -> None:
    listed = {(s.name, v) for s in SOURCES if s.values and s.scope != "quantization"
              for v, _ in s.values}
    assert listed == set(LINEAR_OLD) | set(MOE_OLD)


def test_every_cell_asks_for_what_the_old_release_ran() -> None:
    wrong: list[str] = []
    used: set[int] = set()
    for cell in _cells():
        asks, changes = _plan(cell)
        old = NON_FI_MOE[cell.family] if cell.old == NOT_FI else cell.old
        asks = NON_FI_MOE[cell.family] if asks == NOT_FI else asks
        if asks == old or (old == FLASHINFER and asks.startswith("flashinfer")):
            continue
        rule = next((i for i, e in enumerate(EXCEPTIONS) if e.applies(cell)), None)
        if rule is None or not _shows(EXCEPTIONS[rule].shows, changes):
            wrong.append(f"{cell.settings} -> {asks} (old ran {old}) at {cell.target} "
                         f"{cell.family} {cell.policy}: {[c.reason for c in changes]}")
        else:
            used.add(rule)
    assert not wrong, "\n".join(wrong[:20]) + f"\n({len(wrong)} cells)"
    assert used == set(range(len(EXCEPTIONS))), "exceptions no cell needs any more: " + str(
        [EXCEPTIONS[i].reason for i in set(range(len(EXCEPTIONS))) - used])


def test_scan_writes_what_launch_runs() -> None:
    """`scan` reads the same table: its fix for each old setting is the launcher's change."""
    from proxy.scan.findings import scan_text
    from proxy.scan.rules_bridge import make_translate

    checked = 0
    for cell in _cells():
        if str(cell.target) not in ("0.22.0", "0.24.0", "0.30.0", "0.32.0"):
            continue
        env = " ".join(f"{n}={v}" for n, v in cell.settings if not n.startswith("--"))
        flags = " ".join(f"{n} {v}" for n, v in cell.settings if n.startswith("--"))
        translate = make_translate(str(cell.target), cell.policy, FAMILIES[cell.family])
        found = {f"{f.name}={f.value}" if f.kind == "env" else f"{f.name} {f.value}": f.fix
                 for f, _ in scan_text("serve.sh", "shell", f"{env} vllm serve m {flags}\n",
                                       translate)}
        launched = {c.old: c.new for c in _plan(cell)[1] if c.kind != "warning"}
        assert set(found) == set(launched), cell
        for old, new in launched.items():
            assert found[old] == new if new else found[old] in ("remove it", "by hand")
            checked += 1
    assert checked > 300
