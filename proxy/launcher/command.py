"""The command that starts vLLM: its entry form, vLLM's own arguments, and the flags in them.

Entry forms: `vllm serve MODEL ...`, `<python> -m vllm.entrypoints.openai.api_server ...`
(also `-m vllm.entrypoints.cli.main serve`), and bare arguments when an image's ENTRYPOINT
is the launcher itself. Tokens are kept verbatim: nothing is re-split or re-quoted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

EntryForm = Literal["serve", "module", "bare"]
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")


class CommandError(ValueError):
    """A command the launcher cannot run (the offending word is quoted)."""


@dataclass(frozen=True)
class Command:
    """A parsed vLLM start command: `prefix` runs vLLM, `args` are vLLM's own arguments."""

    form: EntryForm
    prefix: tuple[str, ...]
    args: tuple[str, ...]
    interpreter: str | None = None  # the python named by the module form


@dataclass(frozen=True)
class FlagUse:
    """One occurrence of a flag in `args`: tokens [index, index + width) and its value."""

    index: int
    width: int  # 1 for `--x=v` or a flag without value, 2 for `--x v`
    name: str  # normalised: `--fp4_gemm_backend` -> `--fp4-gemm-backend`
    value: str | None


def parse_command(argv: Sequence[str], *, is_program: Callable[[str], bool]) -> Command:
    """Recognise the entry form. `is_program(word)` says whether a word names an executable
    (it tells `bash ...` from a model name in bare arguments)."""
    if not argv:
        raise CommandError("no command given after `--` (expected e.g. `vllm serve MODEL ...`)")
    first = os.path.basename(argv[0])
    if first == "vllm":
        if len(argv) < 2 or argv[1] != "serve":
            sub = argv[1] if len(argv) > 1 else ""
            raise CommandError(f"unsupported vllm subcommand {sub!r}: only `vllm serve` starts a server")
        return Command("serve", tuple(argv[:2]), tuple(argv[2:]))
    if _PYTHON.match(first):
        return _parse_module(argv)
    if not argv[0].startswith("-") and is_program(argv[0]):
        raise CommandError(
            f"unknown entry form {argv[0]!r}: expected `vllm serve ...`, "
            f"`python -m {API_SERVER_MODULE} ...` or bare vLLM arguments"
        )
    return Command("bare", (), tuple(argv))


def _parse_module(argv: Sequence[str]) -> Command:
    i = 1
    while i < len(argv) and argv[i] != "-m" and argv[i].startswith("-") and argv[i] != "-c":
        i += 1  # interpreter options such as -u or -O
    if i + 1 >= len(argv) or argv[i] != "-m":
        raise CommandError(f"unknown entry form {' '.join(argv[:3])!r}: expected "
                           f"`{argv[0]} -m {API_SERVER_MODULE} ...`")
    module = argv[i + 1]
    if module == API_SERVER_MODULE:
        return Command("module", tuple(argv[: i + 2]), tuple(argv[i + 2:]), argv[0])
    if module == CLI_MODULE and i + 2 < len(argv) and argv[i + 2] == "serve":
        return Command("module", tuple(argv[: i + 3]), tuple(argv[i + 3:]), argv[0])
    raise CommandError(f"unknown entry form: module {module!r} is not vLLM's OpenAI server "
                       f"(expected {API_SERVER_MODULE})")


def normalise_flag(word: str) -> str:
    """vLLM accepts `--a_b` for `--a-b`: the one place flag spellings are made equal."""
    return "--" + word[2:].replace("_", "-") if word.startswith("--") else word


def flag_of(kind: str, name: str) -> str:
    """A flag, or a `--config` YAML key, as the flag vLLM reads (`kernel_config` ->
    `--kernel-config`)."""
    return normalise_flag(name if kind == "flag" else "--" + name)


def find_flags(args: Sequence[str], names: frozenset[str]) -> list[FlagUse]:
    """Occurrences of the value-taking flags `names` (normalised spellings) in `args`."""
    uses: list[FlagUse] = []
    i = 0
    while i < len(args):
        word = args[i]
        head, eq, inline = word.partition("=")
        name = normalise_flag(head)
        if word.startswith("-") and name in names:
            if eq:
                uses.append(FlagUse(i, 1, name, inline))
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                uses.append(FlagUse(i, 2, name, args[i + 1]))
                i += 1
            else:
                raise CommandError(f"{word!r} needs a value")
        i += 1
    return uses


def server_argv(
    command: Command, args: Sequence[str], *, vllm_python: str, exec_prefix: Sequence[str] = (),
) -> tuple[list[str], list[str]]:
    """(prefix, vLLM args) to exec. Bare arguments run `<vllm_python> -m <api server>` (or
    `exec_prefix`); the api server module takes the model as `--model`, not positionally."""
    if command.form != "bare":
        return list(command.prefix), list(args)
    prefix = list(exec_prefix) or [vllm_python, "-m", API_SERVER_MODULE]
    rest = list(args)
    if prefix[-1] == API_SERVER_MODULE and rest and not rest[0].startswith("-"):
        rest = ["--model", rest[0], *rest[1:]]
    return prefix, rest
