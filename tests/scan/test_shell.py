from __future__ import annotations

from proxy.scan.model import file_host, line_and_column
from proxy.scan.shell import find_in_shell, split_commands


def _found(text: str) -> list[tuple[str, str, str | None, tuple[int, int]]]:
    return [(o.kind, o.name, o.value, line_and_column(text, o.offset))
            for o in find_in_shell(text, file_host(text))]


def test_words_keep_quotes_out_and_spans_in() -> None:
    text = """vllm serve "my model" --x='a b' \\\n  --y "$(pwd)"/z # --not-a-flag\n"""
    [words] = split_commands(text)
    assert [w.text for w in words] == ["vllm", "serve", "my model", "--x=a b", "--y", "$(pwd)/z"]
    assert text[words[2].start:words[2].end] == '"my model"'


def test_separators_split_commands() -> None:
    commands = split_commands("a --x 1 && b --y 2; c | d\ne (f)")
    assert [[w.text for w in c] for c in commands] == [
        ["a", "--x", "1"], ["b", "--y", "2"], ["c"], ["d"], ["e"], ["f"]]


def test_flags_with_continuations_and_equals(fixture_text) -> None:
    text = fixture_text("serve.sh")
    found = _found(text)
    assert ("flag", "--fp4-gemm-backend", "cutlass", (12, 5)) in found
    assert ("flag", "--quantization", "nvfp4", (13, 5)) in found
    assert ("env", "VLLM_NVFP4_GEMM_BACKEND", "flashinfer-cutlass", (6, 8)) in found
    assert not any(name == "--not-a-flag" for _, name, _, _ in found)


def test_env_forms() -> None:
    text = "A=1 B='x y' vllm serve m\nexport C=2 D=3\ndocker run -e E=4 --env F=5 img\nG=6\n"
    names = {(o.name, o.value) for o in find_in_shell(text, file_host(text)) if o.kind == "env"}
    assert names == {("A", "1"), ("B", "x y"), ("C", "2"), ("D", "3"), ("E", "4"), ("F", "5"),
                     ("G", "6")}


def test_env_prefix_place_only_for_vllm_programs() -> None:
    text = "exec vllm serve m --a 1\nvllm serve m --b 2\ndocker run img --c 3\n"
    # `NAME=v exec vllm ...` passes NAME to vLLM too
    sites = {o.name: o.site for o in find_in_shell(text, file_host(text))}
    assert sites["--b"].env_prefix_at == text.index("vllm serve m --b")  # type: ignore[union-attr]
    assert sites["--c"].env_prefix_at is None  # type: ignore[union-attr]
    assert sites["--a"].env_prefix_at == 0  # type: ignore[union-attr]


def test_sglang_commands_keep_their_own_flags() -> None:
    text = "python -m sglang.launch_server --model-path m --fp4-gemm-backend flashinfer_cutlass\n"
    assert not [o for o in find_in_shell(text, file_host(text)) if o.kind == "flag"]
