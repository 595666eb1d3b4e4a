"""Sanity of the rule table itself (the facts it encodes)."""

from __future__ import annotations

from itertools import product

from packaging.version import Version

from proxy.launcher.capabilities import FAMILY_NAME
from proxy.launcher.rules import CHOICES, MECHANISMS, SOURCES

RELEASES = [Version(f"0.{minor}.{micro}") for minor in range(10, 35) for micro in (0, 1)]


def test_env_gemm_values_are_hyphenated_and_never_cutedsl() -> None:
    (env,) = [m for m in MECHANISMS if m.outputs and m.outputs[0][1] == "VLLM_NVFP4_GEMM_BACKEND"]
    spelled = {v.value for v in env.values}
    assert "flashinfer-cutedsl" not in spelled
    assert all("_" not in v for v in spelled)
    (source,) = [s for s in SOURCES if s.name == "VLLM_NVFP4_GEMM_BACKEND"]
    assert "flashinfer-cutedsl" not in dict(source.values or ())


def test_version_windows_from_the_facts() -> None:
    by_name = {s.name: s for s in SOURCES}
    assert not by_name["--fp4-gemm-backend"].accepted.contains(Version("0.32.0"))
    assert by_name["VLLM_USE_TRTLLM_FP4_GEMM"].accepted.contains(Version("0.11.0"))
    assert not by_name["VLLM_USE_TRTLLM_FP4_GEMM"].accepted.contains(Version("0.11.1"))
    for name in ("VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_FBGEMM", "VLLM_USE_NVFP4_CT_EMULATIONS",
                 "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_FLASHINFER_MOE_BACKEND"):
        assert by_name[name].accepted.contains(Version("0.23.0"))
        assert by_name[name].deprecated.contains(Version("0.22.0"))
        assert not by_name[name].accepted.contains(Version("0.24.0"))
    assert by_name["--linear-backend"].accepted.contains(Version("0.22.0"))
    assert not by_name["--moe-backend"].accepted.contains(Version("0.16.0"))


def test_every_policy_and_family_has_a_choice() -> None:
    for policy, family, scope in product(("migrate", "preserve"), FAMILY_NAME,
                                         ("linear", "moe")):
        assert any(c.scope == scope and c.policy in (policy, "*")
                   and (c.families == "*" or family in c.families)
                   for c in CHOICES), (policy, family, scope)


def test_a_gemm_kernel_knob_exists_from_0101() -> None:
    # 0.10.0 has only the compressed-tensors emulation switch, no GEMM kernel choice.
    for release in RELEASES:
        found = any(m.scope == "linear" and m.versions.contains(release)
                    and any(v.backend.startswith("flashinfer") for v in m.values)
                    for m in MECHANISMS)
        assert found == (release >= Version("0.10.1")), release
