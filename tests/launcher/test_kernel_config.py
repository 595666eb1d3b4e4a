from __future__ import annotations

import pytest

from proxy.launcher.kernel_config import (
    KernelConfigError,
    merge_kernel_config,
    parse_kernel_config,
)


@pytest.mark.parametrize(("value", "parsed"), [
    ('{"moe_backend": "marlin"}', {"moe_backend": "marlin"}),
    ({"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}},
     {"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}),
    ('{"linear_backend_per_quant": null}', {"linear_backend_per_quant": None}),
])
def test_parse_accepts_what_vllm_reads(value: object, parsed: dict[str, object]) -> None:
    assert parse_kernel_config(value) == parsed


@pytest.mark.parametrize(("value", "why"), [
    ("{not json", "not valid JSON"),
    ('"marlin"', "expected a JSON object"),
    (7, "expected a JSON object"),
    ('{"linear_backend_per_quant": "oops"}', "must map quantization schemes"),
    ('{"linear_backend_per_quant": {}}', "must map quantization schemes"),
    ('{"linear_backend_per_quant": {"nvfp4_w4a4": ["marlin"]}}', "must map"),
])
def test_parse_refuses_with_the_value_quoted(value: object, why: str) -> None:
    with pytest.raises(KernelConfigError, match=why) as refused:
        parse_kernel_config(value, "--config 'c.yaml': kernel-config:")
    assert str(refused.value).startswith(f"--config 'c.yaml': kernel-config: {value!r}: ")


def test_a_long_value_is_quoted_in_part() -> None:
    with pytest.raises(KernelConfigError) as refused:
        parse_kernel_config("[" * 100_000)
    assert len(str(refused.value)) < 400 and "(100002 characters)" in str(refused.value)


def test_merge_adds_our_entry_and_keeps_the_rest() -> None:
    users = {"moe_backend": "marlin", "linear_backend_per_quant": {"fp8": "cutlass"}}
    ours = {"linear_backend_per_quant": {"nvfp4_w4a4": "flashinfer_cutlass"}}
    assert merge_kernel_config(users, ours) == {
        "moe_backend": "marlin",
        "linear_backend_per_quant": {"fp8": "cutlass", "nvfp4_w4a4": "flashinfer_cutlass"}}
    assert users["linear_backend_per_quant"] == {"fp8": "cutlass"}  # not edited in place
