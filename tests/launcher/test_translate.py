"""Table-driven translation over target versions, policies and GPU families."""

from __future__ import annotations

import json
import shlex

import pytest
from packaging.version import Version

from proxy.launcher.translate import (
    Change,
    Setting,
    TranslationError,
    translate,
    translate_setting,
)

SM100, SM120, H200, THOR = (10, 0), (12, 0), (9, 0), (11, 0)
KC = '{{"linear_backend_per_quant": {{"nvfp4_w4a4": "{}"}}}}'


def _kc(backend: str) -> str:
    return shlex.join(["--kernel-config", KC.format(backend)])


# (target, policy, capability) -> what `--fp4-gemm-backend cutlass` becomes (None: dropped).
FP4_CUTLASS = [
    ("0.10.0", "migrate", SM100, None),
    ("0.10.0", "preserve", SM100, None),
    ("0.10.1", "migrate", SM100, None),  # FlashInfer CUTLASS is the default there
    ("0.10.1", "preserve", SM100, None),  # no knob for plain CUTLASS
    ("0.11.0", "migrate", SM120, None),
    ("0.11.1", "migrate", SM100, "VLLM_NVFP4_GEMM_BACKEND=flashinfer-cutlass"),
    ("0.11.1", "preserve", SM100, "VLLM_NVFP4_GEMM_BACKEND=cutlass"),
    ("0.11.1", "migrate", H200, None),  # no marlin value before 0.15
    ("0.15.0", "migrate", H200, "VLLM_NVFP4_GEMM_BACKEND=marlin"),
    ("0.17.0", "migrate", SM120, "VLLM_NVFP4_GEMM_BACKEND=flashinfer-cutlass"),
    ("0.20.0", "preserve", H200, "VLLM_NVFP4_GEMM_BACKEND=cutlass"),
    ("0.22.0", "migrate", SM100, "--linear-backend flashinfer_cutlass"),
    ("0.23.0", "preserve", SM100, "--linear-backend cutlass"),
    ("0.24.0", "migrate", SM100, "--linear-backend flashinfer_cutedsl"),
    ("0.24.0", "migrate", SM120, "--linear-backend flashinfer_cutlass"),
    ("0.28.0", "migrate", H200, "--linear-backend marlin"),
    ("0.30.0", "migrate", SM100, _kc("flashinfer_cutedsl")),
    ("0.32.0", "migrate", None, _kc("flashinfer_cutlass")),
    ("0.32.0", "preserve", SM100, _kc("cutlass")),
    ("0.33.0", "migrate", SM120, _kc("flashinfer_cutlass")),
    ("0.33.0", "migrate", H200, _kc("marlin")),
]


@pytest.mark.parametrize(("target", "policy", "cc", "expected"), FP4_CUTLASS)
def test_fp4_gemm_backend_cutlass(target: str, policy, cc, expected: str | None) -> None:
    changes = translate_setting("flag", "--fp4-gemm-backend", "cutlass", target=Version(target),
                                policy=policy, compute_capability=cc)
    main = [c for c in changes if c.kind == "flag"]
    assert len(main) == 1
    assert main[0].old == "--fp4-gemm-backend cutlass"
    assert main[0].new == expected
    assert main[0].reason


@pytest.mark.parametrize("value", ["auto", "flashinfer_cutlass", "flashinfer-cudnn",
                                   "FLASHINFER_TRTLLM", "cutlass"])
def test_every_sglang_value_is_accepted_with_hyphen_variants(value: str) -> None:
    changes = translate_setting("flag", "--fp4-gemm-backend", value, target=Version("0.32.0"),
                                policy="preserve", compute_capability=SM100)
    assert changes and changes[0].kind == "flag"


def test_preserve_keeps_requested_backend_across_mechanisms() -> None:
    for target, new in [("0.15.0", "VLLM_NVFP4_GEMM_BACKEND=flashinfer-cudnn"),
                        ("0.22.0", "--linear-backend flashinfer_cudnn"),
                        ("0.31.0", _kc("flashinfer_cudnn"))]:
        change = translate_setting("flag", "--fp4-gemm-backend", "flashinfer_cudnn",
                                   target=Version(target), policy="preserve",
                                   compute_capability=SM100)[0]
        assert change.kind == "flag" and change.new == new


def test_unknown_value_is_an_error_quoting_it() -> None:
    with pytest.raises(TranslationError, match="'fastest'"):
        translate_setting("flag", "--fp4-gemm-backend", "fastest", target=Version("0.32.0"))
    with pytest.raises(TranslationError, match="flashinfer-cutedsl"):
        translate_setting("env", "VLLM_NVFP4_GEMM_BACKEND", "flashinfer-cutedsl",
                          target=Version("0.15.0"))


def test_linear_backend_warns_about_all_layers_before_030() -> None:
    changes = translate_setting("flag", "--fp4-gemm-backend", "cutlass", target=Version("0.22.0"),
                                policy="preserve", compute_capability=SM100)
    warnings = [c.reason for c in changes if c.kind == "warning"]
    assert any("ALL quantized linear layers" in w and "fails start-up" in w for w in warnings)
    later = translate_setting("flag", "--fp4-gemm-backend", "cutlass", target=Version("0.32.0"),
                              policy="preserve", compute_capability=SM100)
    assert not [c for c in later if c.kind == "warning"]
    assert "NVFP4-only" in later[0].reason


def test_unknown_capability_warns() -> None:
    changes = translate_setting("flag", "--fp4-gemm-backend", "cutlass", target=Version("0.32.0"))
    assert any(c.kind == "warning" and "compute capability unknown" in c.reason for c in changes)


ENV_CASES = [
    # (name, value, target, policy, cc, expected new)
    ("VLLM_USE_TRTLLM_FP4_GEMM", "1", "0.10.1", "preserve", SM100, "keep"),
    ("VLLM_USE_TRTLLM_FP4_GEMM", "1", "0.11.1", "preserve", SM100,
     "VLLM_NVFP4_GEMM_BACKEND=flashinfer-trtllm"),
    ("VLLM_USE_TRTLLM_FP4_GEMM", "1", "0.32.0", "preserve", SM100, _kc("flashinfer_trtllm")),
    ("VLLM_USE_TRTLLM_FP4_GEMM", "0", "0.20.0", "preserve", SM100, None),
    ("VLLM_NVFP4_GEMM_BACKEND", "cutlass", "0.15.0", "migrate", SM100, "keep"),
    ("VLLM_NVFP4_GEMM_BACKEND", "cutlass", "0.10.1", "preserve", SM100, None),
    ("VLLM_NVFP4_GEMM_BACKEND", "flashinfer-trtllm", "0.10.1", "preserve", SM100,
     "VLLM_USE_TRTLLM_FP4_GEMM=1"),
    ("VLLM_NVFP4_GEMM_BACKEND", "marlin", "0.22.0", "preserve", H200, "--linear-backend marlin"),
    ("VLLM_NVFP4_GEMM_BACKEND", "marlin", "0.14.0", "preserve", H200, None),
    ("VLLM_NVFP4_GEMM_BACKEND", "cutlass", "0.24.0", "migrate", SM100,
     "--linear-backend flashinfer_cutedsl"),
    ("VLLM_USE_FBGEMM", "1", "0.20.0", "preserve", SM100, "keep"),
    ("VLLM_USE_FBGEMM", "1", "0.28.0", "preserve", SM100, "--linear-backend fbgemm"),
    ("VLLM_USE_FBGEMM", "0", "0.24.0", "preserve", SM100, None),
    ("VLLM_USE_NVFP4_CT_EMULATIONS", "1", "0.23.0", "preserve", SM100,
     "--linear-backend emulation"),
    ("VLLM_USE_NVFP4_CT_EMULATIONS", "1", "0.33.0", "preserve", SM100, _kc("emulation")),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.30.0", "preserve", SM100, "--moe-backend cutlass"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.24.0", "migrate", (12, 1), "--moe-backend cutlass"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.22.0", "migrate", H200, "--moe-backend marlin"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.21.0", "migrate", SM100, "keep"),
    # Jetson Thor: vLLM's CUTLASS NVFP4 MoE ran there until 0.33; 0.34 runs Marlin instead.
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.33.0", "preserve", THOR, "--moe-backend cutlass"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.34.0", "preserve", THOR, "--moe-backend marlin"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.34.0", "migrate", (10, 1), "--moe-backend marlin"),
    ("VLLM_USE_FLASHINFER_MOE_FP4", "0", "0.34.0", "migrate", SM120, "--moe-backend cutlass"),
]


@pytest.mark.parametrize(("name", "value", "target", "policy", "cc", "expected"), ENV_CASES)
def test_env_vars(name: str, value: str, target: str, policy, cc, expected) -> None:
    changes = translate_setting("env", name, value, target=Version(target), policy=policy,
                                compute_capability=cc)
    if expected == "keep":
        assert changes == []
        return
    main = [c for c in changes if c.kind == "env"]
    assert len(main) == 1 and main[0].old == f"{name}={value}"
    assert main[0].new == expected
    if expected is None:  # never a silent removal: either nothing changes, or a hand is needed
        assert ("only when asked" in main[0].reason) != (main[0].manual is not None)
        assert main[0].manual is None or f"vLLM {target}" in main[0].manual


@pytest.mark.parametrize(("target", "moe_value", "expected"), [
    ("0.10.0", "latency", "keep"),
    ("0.10.1", "latency", "keep"),
    ("0.16.0", "throughput", "keep"),
    ("0.22.0", "latency", "--moe-backend flashinfer_trtllm"),
    ("0.24.0", "throughput", "--moe-backend flashinfer_cutlass"),
    ("0.33.0", "masked_gemm", "--moe-backend flashinfer_cutedsl"),
])
def test_flashinfer_moe_pair(target: str, moe_value: str, expected: str) -> None:
    settings = [Setting("env", "VLLM_USE_FLASHINFER_MOE_FP4", "1"),
                Setting("env", "VLLM_FLASHINFER_MOE_BACKEND", moe_value)]
    result = translate(settings, target=Version(target), policy="migrate",
                       compute_capability=SM100)
    fp4 = [c for c in result.changes if c.old == "VLLM_USE_FLASHINFER_MOE_FP4=1"]
    if expected == "keep":
        assert fp4 == []
    else:
        assert fp4[0].new == expected and fp4[0].new_kind == "flag"
        removed = [c for c in result.changes if c.old.startswith("VLLM_FLASHINFER_MOE_BACKEND")]
        assert removed and removed[0].new is None


@pytest.mark.parametrize(("target", "expected"), [
    ("0.16.0", "VLLM_USE_FLASHINFER_MOE_FP4=1 VLLM_FLASHINFER_MOE_BACKEND=throughput"),
    ("0.10.0", "VLLM_USE_FLASHINFER_MOE_FP4=1"),
    ("0.17.0", "--moe-backend flashinfer_cutlass"),
])
def test_moe_runner_backend(target: str, expected: str) -> None:
    (change,) = translate_setting("flag", "--moe-runner-backend", "flashinfer_cutlass",
                                  target=Version(target))
    assert change.new == expected


@pytest.mark.parametrize("target", ["0.10.0", "0.20.0", "0.33.0"])
def test_quantization_nvfp4_is_dropped(target: str) -> None:
    for name in ("--quantization", "-q"):
        (change,) = translate_setting("flag", name, "nvfp4", target=Version(target))
        assert change.new is None and "modelopt_fp4" in change.reason
    assert translate_setting("flag", "--quantization", "fp8", target=Version(target)) == []


def test_explicit_new_setting_wins_with_a_warning() -> None:
    settings = [Setting("flag", "--fp4-gemm-backend", "cutlass"),
                Setting("flag", "--linear-backend", "marlin")]
    result = translate(settings, target=Version("0.32.0"), policy="migrate",
                       compute_capability=SM100)
    assert result.linear_backend == "marlin"
    assert [a.source.name for a in result.actions] == ["--fp4-gemm-backend"]
    assert any(c.kind == "warning" and "wins" in c.reason for c in result.changes)


def test_user_kernel_config_nvfp4_entry_wins() -> None:
    kc = json.dumps({"linear_backend_per_quant": {"nvfp4_w4a4": "cutlass"}})
    settings = [Setting("env", "VLLM_NVFP4_GEMM_BACKEND", "flashinfer-cudnn"),
                Setting("flag", "--kernel-config", kc)]
    result = translate(settings, target=Version("0.31.0"), policy="migrate",
                       compute_capability=SM120)
    assert result.linear_backend == "cutlass"
    assert result.actions[0].replacement == ()


def test_deprecated_env_at_022_becomes_the_flag_unless_only_env_can_say_it() -> None:
    change = translate_setting("env", "VLLM_NVFP4_GEMM_BACKEND", "cutlass",
                               target=Version("0.22.0"), policy="preserve")[0]
    assert change.new == "--linear-backend cutlass"
    b12x = translate_setting("env", "VLLM_NVFP4_GEMM_BACKEND", "flashinfer-b12x",
                             target=Version("0.23.0"), policy="preserve")
    assert [c.kind for c in b12x] == ["warning"]


def test_config_key_becomes_config_key() -> None:
    change = translate_setting("config", "fp4_gemm_backend", "cutlass",
                               target=Version("0.24.0"), policy="preserve")[0]
    assert change.new == "linear-backend: cutlass"


def test_removed_env_never_survives() -> None:
    names = ["VLLM_USE_TRTLLM_FP4_GEMM", "VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_FBGEMM",
             "VLLM_USE_NVFP4_CT_EMULATIONS", "VLLM_USE_FLASHINFER_MOE_FP4",
             "VLLM_FLASHINFER_MOE_BACKEND"]
    values = {"VLLM_NVFP4_GEMM_BACKEND": "cutlass", "VLLM_FLASHINFER_MOE_BACKEND": "latency"}
    settings = [Setting("env", n, values.get(n, "1")) for n in names]
    for target in ("0.24.0", "0.28.0", "0.33.0"):
        result = translate(settings, target=Version(target), policy="migrate",
                           compute_capability=SM100)
        kept_env = {s.name for a in result.actions for s in a.replacement if s.kind == "env"}
        touched = {a.source.name for a in result.actions}
        assert touched == set(names) and not kept_env


def test_scanner_api_with_related_env() -> None:
    related = {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "latency"}
    (fp4,) = translate_setting("env", "VLLM_USE_FLASHINFER_MOE_FP4", "1", target=Version("0.30.0"),
                               related_env=related)
    assert (fp4.new, fp4.new_kind) == ("--moe-backend flashinfer_trtllm", "flag")
    (backend,) = translate_setting("env", "VLLM_FLASHINFER_MOE_BACKEND", "latency",
                                   target=Version("0.30.0"), related_env=related)
    assert backend.new is None and "silently ignored" in backend.reason


@pytest.mark.parametrize(("value", "target", "cc", "expected"), [
    ("marlin", "0.32.0", SM120, _kc("marlin")),
    ("flashinfer-trtllm", "0.24.0", SM100, "--linear-backend flashinfer_trtllm"),
    ("flashinfer-cudnn", "0.30.0", H200, _kc("flashinfer_cudnn")),
])
def test_migrate_keeps_a_choice_the_target_still_offers(value: str, target: str, cc,
                                                        expected: str) -> None:
    for policy in ("migrate", "preserve"):
        (change, *_) = translate_setting("env", "VLLM_NVFP4_GEMM_BACKEND", value,
                                         target=Version(target), policy=policy,
                                         compute_capability=cc)
        assert change.new == expected and "explicit choice keeps its meaning" in change.reason


def test_the_thor_opt_out_says_why_it_is_marlin_from_0_34() -> None:
    (change,) = translate_setting("env", "VLLM_USE_FLASHINFER_MOE_FP4", "0",
                                  target=Version("0.34.0"), compute_capability=THOR)
    assert change.new == "--moe-backend marlin"
    assert "vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE on SM110 (Jetson Thor)" in change.reason


def test_an_explicit_cutlass_moe_on_thor_is_kept_with_a_warning_from_0_34() -> None:
    def warnings(target: str) -> list[str]:
        changes = translate_setting("flag", "--moe-runner-backend", "cutlass",
                                    target=Version(target), compute_capability=THOR)
        assert [c.new for c in changes if c.kind == "flag"] == ["--moe-backend cutlass"]
        return [c.reason for c in changes if c.kind == "warning"]

    assert warnings("0.33.0") == []
    assert any("vLLM 0.34 no longer runs its CUTLASS NVFP4 MoE" in w for w in warnings("0.34.0"))


def test_flashinfer_opt_out_against_an_explicit_moe_backend() -> None:
    def run(moe: str) -> list[Change]:
        settings = [Setting("env", "VLLM_USE_FLASHINFER_MOE_FP4", "0"),
                    Setting("flag", "--moe-backend", moe)]
        result = translate(settings, target=Version("0.32.0"), policy="migrate",
                           compute_capability=SM100)
        assert result.moe_backend == moe and len(result.actions) == 1
        return [c for c in result.changes if c.kind == "warning"]

    assert run("marlin") == []  # FlashInfer stays out: nothing to warn about
    (conflict,) = run("flashinfer_trtllm")
    assert "wins over" in conflict.reason


def test_no_equivalent_is_a_manual_edit_never_a_silent_removal() -> None:
    (change,) = translate_setting("env", "VLLM_NVFP4_GEMM_BACKEND", "flashinfer-b12x",
                                  target=Version("0.25.0"), policy="preserve")
    assert change.new is None and change.manual is not None
    assert "vLLM 0.25.0" in change.manual and "flashinfer_b12x" in change.manual
    (below,) = translate_setting("flag", "--fp4-gemm-backend", "cutlass", target=Version("0.14.0"),
                                 policy="migrate", compute_capability=H200)
    assert below.manual is None and "picks by itself" in below.reason  # vLLM falls to Marlin


def test_deprecated_opt_in_that_asks_for_nothing_says_so() -> None:
    (change,) = translate_setting("env", "VLLM_USE_FBGEMM", "0", target=Version("0.22.0"))
    assert change.new is None and "still reads it but deprecates it" in change.reason
