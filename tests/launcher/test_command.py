"""Entry forms and flag occurrences, tokens kept verbatim."""

from __future__ import annotations

import pytest

from proxy.launcher.command import (
    API_SERVER_MODULE,
    CommandError,
    find_flags,
    parse_command,
    server_argv,
)


def _nothing_is_a_program(word: str) -> bool:
    return False


@pytest.mark.parametrize(("argv", "form", "prefix_len"), [
    (["vllm", "serve", "m", "--port", "1"], "serve", 2),
    (["/usr/local/bin/vllm", "serve", "m"], "serve", 2),
    (["python3", "-m", API_SERVER_MODULE, "--model", "m"], "module", 3),
    (["/opt/venv/bin/python3.12", "-u", "-m", API_SERVER_MODULE, "--model", "m"], "module", 4),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], "module", 4),
    (["--model", "m", "--port", "8000"], "bare", 0),
    (["nvidia/Llama-3.1-8B-Instruct-FP4", "--fp4-gemm-backend", "cutlass"], "bare", 0),
])
def test_entry_forms(argv: list[str], form: str, prefix_len: int) -> None:
    command = parse_command(argv, is_program=_nothing_is_a_program)
    assert command.form == form
    assert list(command.prefix) == argv[:prefix_len]
    assert list(command.args) == argv[prefix_len:]


@pytest.mark.parametrize(("argv", "quoted"), [
    ([], "no command"),
    (["vllm", "chat"], "'chat'"),
    (["python", "-m", "sglang.launch_server", "--model", "m"], "'sglang.launch_server'"),
    (["python3", "script.py"], "python3 script.py"),
    (["bash", "-c", "vllm serve m"], "'bash'"),
])
def test_unknown_entry_forms_are_errors(argv: list[str], quoted: str) -> None:
    with pytest.raises(CommandError, match=quoted):
        parse_command(argv, is_program=lambda w: w == "bash")


def test_find_flags_both_spellings_repeats_and_underscores() -> None:
    args = ["m", "--fp4-gemm-backend", "cutlass", "--enforce-eager", "--fp4_gemm_backend=auto",
            "-q", "nvfp4", "--served-model-name", "a b"]
    uses = find_flags(args, frozenset({"--fp4-gemm-backend", "-q"}))
    assert [(u.index, u.width, u.name, u.value) for u in uses] == [
        (1, 2, "--fp4-gemm-backend", "cutlass"),
        (4, 1, "--fp4-gemm-backend", "auto"),
        (5, 2, "-q", "nvfp4"),
    ]


def test_flag_without_value_is_an_error() -> None:
    with pytest.raises(CommandError, match="'--fp4-gemm-backend' needs a value"):
        find_flags(["m", "--fp4-gemm-backend"], frozenset({"--fp4-gemm-backend"}))
    with pytest.raises(CommandError):
        find_flags(["m", "--fp4-gemm-backend", "--port", "1"], frozenset({"--fp4-gemm-backend"}))


def test_bare_arguments_run_the_api_server_with_model_flag() -> None:
    command = parse_command(["my/model", "--port", "8000"], is_program=_nothing_is_a_program)
    prefix, args = server_argv(command, command.args, vllm_python="/v/bin/python")
    assert prefix == ["/v/bin/python", "-m", API_SERVER_MODULE]
    assert args == ["--model", "my/model", "--port", "8000"]
    prefix, args = server_argv(command, command.args, vllm_python="/x",
                               exec_prefix=["vllm", "serve"])
    assert prefix == ["vllm", "serve"] and args == ["my/model", "--port", "8000"]


def test_serve_form_keeps_its_prefix_and_quoting() -> None:
    command = parse_command(["vllm", "serve", "m", "--chat-template", "{{ a b }}"],
                            is_program=_nothing_is_a_program)
    prefix, args = server_argv(command, command.args, vllm_python="/ignored")
    assert prefix + args == ["vllm", "serve", "m", "--chat-template", "{{ a b }}"]
