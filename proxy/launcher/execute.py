"""The launcher's I/O edges: finding programs and vLLM's interpreter, and the final exec."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from proxy.launcher.command import Command
from proxy.launcher.versions import read_shebang_interpreter


def is_program(word: str, env: Mapping[str, str]) -> bool:
    """Whether `word` names an executable (a path to one, or a name on PATH)."""
    if os.sep in word:
        return os.path.isfile(word) and os.access(word, os.X_OK)
    return shutil.which(word, path=env.get("PATH")) is not None


def resolve_vllm_python(
    command: Command,
    *,
    override: str | None,
    env: Mapping[str, str],
    exec_prefix: Sequence[str] = (),
) -> str:
    """The interpreter that will run vLLM: `--vllm-python`, the module form's python, the
    shebang of `vllm` on PATH, an exec prefix's python, else the launcher's own."""
    if override:
        return override
    path = env.get("PATH")
    if command.form == "module" and command.interpreter:
        word = command.interpreter
        return word if os.sep in word else (shutil.which(word, path=path) or word)
    if command.form == "serve":
        script = command.prefix[0]
        script = script if os.sep in script else (shutil.which(script, path=path) or "")
        found = read_shebang_interpreter(script, env) if script else None
        if found:
            return found
    if command.form == "bare" and exec_prefix and "python" in os.path.basename(exec_prefix[0]):
        return shutil.which(exec_prefix[0], path=path) or exec_prefix[0]
    return sys.executable


def exec_vllm(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with vLLM: same PID, so signals reach vLLM directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], list(argv), dict(env))
