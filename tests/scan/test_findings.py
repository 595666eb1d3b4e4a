from __future__ import annotations

import pytest

from proxy.scan.findings import Replacement, plan_edits, scan_text
from proxy.scan.model import file_host
from proxy.scan.shell import find_in_shell
from proxy.scan.yaml_finder import find_in_yaml


def test_flag_in_env_block_is_manual(fixture_text, translate) -> None:
    text = fixture_text("docker-compose.yml")
    results = scan_text("c.yml", "yaml", text, translate)
    by_name = {(f.name, f.line): (f, plan) for f, plan in results}
    finding, plan = by_name[("VLLM_NVFP4_GEMM_BACKEND", 34)]
    assert finding.status == "manual" and plan is None
    assert "vLLM flag" in finding.note
    finding, plan = by_name[("--fp4-gemm-backend", 13)]
    assert finding.status == "fixable" and plan is not None
    assert finding.human() == ("c.yml:13: found --fp4-gemm-backend cutlass -> fix "
                               "--linear-backend flashinfer_cutlass (renamed flag)")


def test_env_from_flag_goes_in_front_of_vllm_or_is_manual() -> None:
    repl = Replacement((), (("VLLM_NVFP4_GEMM_BACKEND", "cutlass"),), "no flag yet")
    text = "vllm serve m --fp4-gemm-backend cutlass\n"
    [occ] = find_in_shell(text, file_host(text))
    edits, note = plan_edits(occ, repl)
    assert edits is not None and note == ""
    yaml_text = "args: [--fp4-gemm-backend, cutlass]\n"
    [occ] = find_in_yaml(yaml_text)
    edits, note = plan_edits(occ, repl)
    assert edits is None and "environment variable" in note


@pytest.mark.parametrize(("old", "flags", "expected"), [
    ("fp4-gemm-backend: cutlass\n", ("--linear-backend", "cutlass"), "linear-backend: cutlass\n"),
    ("fp4_gemm_backend: cutlass\n", ("--linear-backend", "cutlass"), "linear_backend: cutlass\n"),
    ("quantization: nvfp4\nport: 1\n", (), "port: 1\n"),
])
def test_config_keys(old: str, flags: tuple[str, ...], expected: str) -> None:
    from proxy.scan.edits import apply_edits

    occ = find_in_yaml(old)[0]
    edits, _ = plan_edits(occ, Replacement(flags, (), "r"))
    assert edits is not None
    assert apply_edits(old, edits) == expected


def test_json_row_has_the_promised_keys(fixture_text, translate) -> None:
    [(finding, _)] = [r for r in scan_text("v.env", "env", fixture_text("vllm.env"), translate)
                      if r[0].name == "VLLM_USE_TRTLLM_FP4_GEMM"]
    row = finding.to_json()
    assert {"file", "line", "column", "kind", "name", "value", "fix", "reason"} <= row.keys()
    assert (row["line"], row["column"], row["kind"]) == (3, 8, "env")
