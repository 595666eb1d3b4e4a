"""Shared helpers for the scanner tests: the realistic fixture files."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_text() -> object:
    def read(name: str) -> str:
        return (FIXTURES / name).read_text(encoding="utf-8")

    return read


def fake_setting(occ):  # type: ignore[no-untyped-def]
    """A stand-in for the launcher's table in tests of the scanner's own mechanics:
    one flag rewritten, one dropped, one env var renamed, the rest become flags."""
    from proxy.scan.findings import Replacement
    name = occ.name if occ.kind != "config" else "--" + occ.name
    name = name.replace("_", "-") if occ.kind != "env" else name
    if name == "--fp4-gemm-backend":
        return Replacement(("--linear-backend", "flashinfer_cutlass"), (), "renamed flag")
    if name == "--quantization" and occ.value == "nvfp4":
        return Replacement((), (), "vLLM detects the checkpoint's method")
    if name == "VLLM_USE_TRTLLM_FP4_GEMM":
        return Replacement((), (("VLLM_NEW_FP4_BACKEND", "flashinfer-trtllm"),), "renamed var")
    if name in ("VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_FBGEMM"):
        return Replacement(("--linear-backend", "cutlass"), (), "now a flag")
    return None


def per_setting(one):  # type: ignore[no-untyped-def]
    return lambda occs: [one(occ) for occ in occs]


fake_translate = per_setting(fake_setting)


@pytest.fixture
def translate() -> object:
    return fake_translate
