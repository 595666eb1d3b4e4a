from __future__ import annotations

from proxy.scan.dockerfile import find_in_dockerfile, instructions
from proxy.scan.model import line_and_column


def _found(text: str) -> list[tuple[str, str, str | None, int, str]]:
    return [(o.kind, o.name, o.value, line_and_column(text, o.offset)[0], o.host.kind)
            for o in find_in_dockerfile(text)]


def test_instructions_follow_continuations() -> None:
    text = "FROM x\n# comment\nRUN a \\\n  b \\\n  c\nCMD d\n"
    assert [(i.keyword, text[i.start:i.end]) for i in instructions(text)] == [
        ("FROM", "FROM x"), ("RUN", "RUN a \\\n  b \\\n  c"), ("CMD", "CMD d")]


def test_realistic_dockerfile(fixture_text) -> None:
    text = fixture_text("Dockerfile")
    found = _found(text)
    assert ("env", "VLLM_NVFP4_GEMM_BACKEND", "cutlass", 5, "file") in found
    assert ("env", "VLLM_USE_NVFP4_CT_EMULATIONS", "0", 6, "file") in found
    assert ("env", "VLLM_USE_TRTLLM_FP4_GEMM", "1", 7, "file") in found
    assert ("flag", "--fp4-gemm-backend", "cutlass", 14, "file") in found
    assert ("flag", "--quantization", "nvfp4", 14, "file") in found
    assert ("flag", "--port", "8000", 15, "file") in found


def test_exec_form_shell_script_and_shell_form() -> None:
    text = ('ENTRYPOINT ["sh", "-c", "exec vllm serve m --fp4-gemm-backend=cutlass"]\n'
            "RUN vllm serve m \\\n    --quantization nvfp4\n")
    found = _found(text)
    assert ("flag", "--fp4-gemm-backend", "cutlass", 1, "json_string") in found
    assert ("flag", "--quantization", "nvfp4", 3, "file") in found


def test_broken_json_is_shell_form() -> None:
    found = _found('CMD ["vllm", --fp4-gemm-backend cutlass\n')
    assert ("flag", "--fp4-gemm-backend", "cutlass", 1, "file") in found
