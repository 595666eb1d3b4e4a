"""Finding vLLM's interpreter and exec'ing in place (same PID)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from proxy.launcher.command import Command
from proxy.launcher.execute import is_program, resolve_vllm_python


def _exe(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_is_program(tmp_path: Path) -> None:
    tool = _exe(tmp_path / "tool", "#!/bin/sh\n")
    env = {"PATH": str(tmp_path)}
    assert is_program("tool", env) and is_program(tool, env)
    assert not is_program("nvidia/Llama-3.1-8B-Instruct-FP4", env)
    assert not is_program("model-dir", env)


def test_resolve_python_per_form(tmp_path: Path) -> None:
    _exe(tmp_path / "vllm", "#!/opt/vllm/bin/python3\n")
    env = {"PATH": str(tmp_path)}
    serve = Command("serve", ("vllm", "serve"), ("m",))
    assert resolve_vllm_python(serve, override=None, env=env) == "/opt/vllm/bin/python3"
    assert resolve_vllm_python(serve, override="/x/python", env=env) == "/x/python"
    module = Command("module", ("/v/bin/python", "-m", "x"), (), "/v/bin/python")
    assert resolve_vllm_python(module, override=None, env=env) == "/v/bin/python"
    bare = Command("bare", (), ("m",))
    assert resolve_vllm_python(bare, override=None, env=env) == sys.executable
    no_vllm = resolve_vllm_python(serve, override=None, env={"PATH": str(tmp_path / "none")})
    assert no_vllm == sys.executable


def test_exec_keeps_the_pid(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from proxy.launcher.execute import exec_vllm\n"
        "print(os.getpid(), flush=True)\n"
        "exec_vllm(['/bin/sh', '-c', 'echo $$ $VLLM_X'], {'VLLM_X': 'set', 'PATH': '/bin'})\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": root}).stdout
    before, after = out.split("\n")[:2]
    assert after == f"{before} set"
