from __future__ import annotations

import yaml

from proxy.scan.findings import scan_text
from proxy.scan.rewrite import apply_plans


def _fix(kind: str, text: str, translate) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    results = scan_text("f", kind, text, translate)
    new, applied = apply_plans(text, [p for _, p in results if p], kind == "yaml")
    return new, len(applied)


def test_plain_scalar_that_cannot_hold_the_new_text_becomes_double_quoted(translate) -> None:
    def to_kernel_config(occ):  # type: ignore[no-untyped-def]
        from proxy.scan.findings import Replacement

        if occ.name != "--fp4-gemm-backend":
            return None
        return Replacement(("--kernel-config", '{"a": {"b": "c"}}'), (), "r")

    text = "services:\n  a:\n    command: vllm serve m --fp4-gemm-backend cutlass  # keep\n"
    new, applied = _fix("yaml", text, lambda occs: [to_kernel_config(o) for o in occs])
    assert applied == 1
    assert new.endswith("  # keep\n")
    command = yaml.safe_load(new)["services"]["a"]["command"]
    assert command == """vllm serve m --kernel-config '{"a": {"b": "c"}}'"""


def test_folded_command_keeps_its_lines(translate) -> None:
    text = ("services:\n  a:\n    command: >\n      --model m\n      --fp4-gemm-backend cutlass\n"
            "      --quantization nvfp4\n      --port 1\n")
    new, applied = _fix("yaml", text, translate)
    assert applied == 2
    assert new == ("services:\n  a:\n    command: >\n      --model m\n"
                   "      --linear-backend flashinfer_cutlass\n      --port 1\n")


def test_double_quoted_command_string(translate) -> None:
    text = 'command: "vllm serve \\"m\\" --fp4-gemm-backend=cutlass"\n'
    new, applied = _fix("yaml", text, translate)
    assert applied == 1
    assert new == 'command: "vllm serve \\"m\\" --linear-backend flashinfer_cutlass"\n'


def test_sh_c_script_in_dockerfile_exec_form(translate) -> None:
    text = 'CMD ["sh", "-c", "vllm serve m --quantization nvfp4 --port 1"]\n'
    new, applied = _fix("dockerfile", text, translate)
    assert (new, applied) == ('CMD ["sh", "-c", "vllm serve m --port 1"]\n', 1)


def test_untouched_text_stays_byte_for_byte(fixture_text, translate) -> None:
    text = fixture_text("k8s-deployment.yaml")
    new, _ = _fix("yaml", text, translate)
    old_lines, new_lines = text.splitlines(), new.splitlines()
    assert old_lines[:31] == new_lines[:31]
    assert old_lines[-8:] == new_lines[-8:]
