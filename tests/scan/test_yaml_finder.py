from __future__ import annotations

import pytest
import yaml

from proxy.scan.model import line_and_column
from proxy.scan.rewrite import file_offset
from proxy.scan.yaml_finder import find_in_yaml, is_config_document, parse_documents, value_at


def _found(text: str) -> list[tuple[str, str, str | None, tuple[int, int], str]]:
    return [(o.kind, o.name, o.value, line_and_column(text, file_offset(text, o)), o.host.kind)
            for o in find_in_yaml(text)]


def test_compose_two_services(fixture_text) -> None:
    text = fixture_text("docker-compose.yml")
    found = _found(text)
    assert ("flag", "--fp4-gemm-backend", "cutlass", (13, 55), "yaml_scalar") in found
    assert ("flag", "--quantization", "nvfp4", (13, 82), "yaml_scalar") in found
    assert ("env", "VLLM_USE_TRTLLM_FP4_GEMM", "1", (15, 7), "file") in found
    assert ("flag", "--fp4-gemm-backend", "flashinfer_cutlass", (30, 10), "file") in found
    assert ("env", "VLLM_NVFP4_GEMM_BACKEND", "cutlass", (34, 9), "file") in found
    assert not any(kind == "config" for kind, *_ in found)


def test_kubernetes_multi_document(fixture_text) -> None:
    text = fixture_text("k8s-deployment.yaml")
    found = _found(text)
    assert ("flag", "--fp4-gemm-backend", "cutlass", (33, 15), "file") in found
    assert ("flag", "--quantization", "nvfp4", (35, 15), "file") in found
    assert ("env", "VLLM_USE_FLASHINFER_MOE_FP4", "1", (41, 21), "file") in found
    assert ("env", "HF_TOKEN", None, (45, 21), "file") in found


def test_vllm_config_keys(fixture_text) -> None:
    text = fixture_text("vllm-config.yaml")
    found = _found(text)
    assert ("config", "fp4-gemm-backend", "cutlass", (5, 1), "file") in found
    assert ("config", "quantization", "nvfp4", (6, 1), "file") in found
    assert is_config_document(parse_documents(text)[0])


def test_sh_c_script_in_list_and_folded_command() -> None:
    text = ('command: ["sh", "-c", "vllm serve m --fp4-gemm-backend cutlass"]\n'
            "args: >\n  --model m\n  --quantization nvfp4\n")
    found = _found(text)
    assert ("flag", "--fp4-gemm-backend", "cutlass", (1, 37), "yaml_scalar") in found
    assert ("flag", "--quantization", "nvfp4", (4, 3), "yaml_scalar") in found


def test_value_at_and_bad_yaml() -> None:
    assert value_at("a:\n  - x\n  - y\n---\nb: z\n", (1, "b")) == "z"
    assert value_at("a: [", (0, "a")) is None
    with pytest.raises(yaml.YAMLError):
        find_in_yaml("a: [\n")


def test_anchored_environment_is_reported_once_and_merges_are_read() -> None:
    text = ("x-env: &env\n  VLLM_USE_FBGEMM: '1'\nservices:\n  a:\n    environment: *env\n"
            "  b:\n    environment:\n      <<: *env\n      OTHER: x\n  c:\n    environment: *env\n")
    names = [(o.name, line_and_column(text, o.offset)[0]) for o in find_in_yaml(text)]
    assert names == [("VLLM_USE_FBGEMM", 2), ("OTHER", 9)]
