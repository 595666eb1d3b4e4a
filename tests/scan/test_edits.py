from __future__ import annotations

import pytest

from proxy.scan.edits import (
    apply_edits,
    encode_token,
    prefix_env,
    remove_entry,
    replace_flag,
    set_key_value,
)
from proxy.scan.envfile import find_in_env_file
from proxy.scan.model import Edit, file_host
from proxy.scan.shell import find_in_shell
from proxy.scan.yaml_finder import find_in_yaml


def _shell(text: str, name: str):  # type: ignore[no-untyped-def]
    return next(o for o in find_in_shell(text, file_host(text)) if o.name == name)


def _yaml(text: str, name: str):  # type: ignore[no-untyped-def]
    return next(o for o in find_in_yaml(text) if o.name == name)


@pytest.mark.parametrize(("style", "token", "encoded"), [
    ("shell", "flashinfer_cutlass", "flashinfer_cutlass"),
    ("shell", '{"a": "b"}', """'{"a": "b"}'"""),
    ("json", 'x"y', '"x\\"y"'),
    ("yaml_plain", "--linear-backend", "--linear-backend"),
    ("yaml_plain", "8000", "'8000'"),
    ("yaml_plain", '{"a": 1}', """'{"a": 1}'"""),
    ("yaml_single", "it's", "'it''s'"),
    ("yaml_double", "x", '"x"'),
    ("raw", "flashinfer-trtllm", "flashinfer-trtllm"),
])
def test_encode_token(style: str, token: str, encoded: str) -> None:
    assert encode_token(style, token) == encoded  # type: ignore[arg-type]


def test_shell_replace_and_remove_with_continuations() -> None:
    text = "vllm serve m \\\n    --fp4-gemm-backend cutlass \\\n    --quantization nvfp4\necho done\n"
    flag = _shell(text, "--fp4-gemm-backend")
    quant = _shell(text, "--quantization")
    new = apply_edits(text, replace_flag(flag, ["--linear-backend", "flashinfer_cutlass"])
                      + replace_flag(quant, []))
    assert new == "vllm serve m \\\n    --linear-backend flashinfer_cutlass\necho done\n"


def test_shell_remove_first_and_middle() -> None:
    text = "vllm serve m --quantization=nvfp4 --port 1\n"
    assert apply_edits(text, replace_flag(_shell(text, "--quantization"), [])) == \
        "vllm serve m --port 1\n"


def test_prefix_env_only_before_vllm() -> None:
    text = "vllm serve m --fp4-gemm-backend cutlass --port 1\n"
    edits = prefix_env(_shell(text, "--fp4-gemm-backend"), "VLLM_NVFP4_GEMM_BACKEND", "cutlass")
    assert edits is not None
    assert apply_edits(text, edits) == "VLLM_NVFP4_GEMM_BACKEND=cutlass vllm serve m --port 1\n"
    other = "docker run img --fp4-gemm-backend cutlass\n"
    assert prefix_env(_shell(other, "--fp4-gemm-backend"), "X", "1") is None


def test_block_list_one_item_becomes_two_lines() -> None:
    text = "args:\n  - m\n  - --fp4-gemm-backend=cutlass  # old\n  - --port\n"
    new = apply_edits(text, replace_flag(_yaml(text, "--fp4-gemm-backend"),
                                         ["--linear-backend", "flashinfer_cutlass"]))
    assert new == ("args:\n  - m\n  - --linear-backend\n  - flashinfer_cutlass  # old\n"
                   "  - --port\n")


def test_block_list_removal_drops_lines() -> None:
    text = "args:\n  - m\n  - --quantization\n  - nvfp4 # x\n  - --port\n"
    new = apply_edits(text, replace_flag(_yaml(text, "--quantization"), []))
    assert new == "args:\n  - m\n  - --port\n"


@pytest.mark.parametrize(("text", "expected"), [
    ('command: ["m", "--quantization", "nvfp4", "--port", "1"]\n', 'command: ["m", "--port", "1"]\n'),
    ('command: ["--quantization", "nvfp4", "--port", "1"]\n', 'command: ["--port", "1"]\n'),
    ('command: ["--quantization=nvfp4"]\n', "command: []\n"),
])
def test_flow_list_removal(text: str, expected: str) -> None:
    assert apply_edits(text, replace_flag(_yaml(text, "--quantization"), [])) == expected


def test_key_value_rename_keeps_quotes() -> None:
    text = "env:\n  VLLM_USE_TRTLLM_FP4_GEMM: '1'  # note\n"
    edits = set_key_value(_yaml(text, "VLLM_USE_TRTLLM_FP4_GEMM"), "VLLM_NVFP4_GEMM_BACKEND",
                          "flashinfer-trtllm")
    assert apply_edits(text, edits or []) == \
        "env:\n  VLLM_NVFP4_GEMM_BACKEND: 'flashinfer-trtllm'  # note\n"


def test_remove_env_file_line() -> None:
    text = "A=1\nexport B=2\nC=3\n"
    occ = next(o for o in find_in_env_file(text) if o.name == "B")
    assert apply_edits(text, remove_entry(occ) or []) == "A=1\nC=3\n"


@pytest.mark.parametrize("keep", [[], ["A"], ["B"], ["C"]])
def test_removing_neighbouring_env_prefixes(keep: list[str]) -> None:
    # Found by the scan fuzz test: each removal also took the blank before it, so two
    # neighbours overlapped and --fix changed nothing.
    text = "A=1 B='x y' \\\n  C=2 vllm serve m\n"
    edits = [e for name in "ABC" if name not in keep
             for e in remove_entry(_shell(text, name)) or []]
    kept = {"A": "A=1 ", "B": "B='x y' \\\n  ", "C": "C=2 "}
    assert apply_edits(text, edits) == "".join(kept[n] for n in keep) + "vllm serve m\n"


def test_overlapping_edits_rejected() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        apply_edits("abcdef", [Edit(0, 3, ""), Edit(2, 4, "")])
