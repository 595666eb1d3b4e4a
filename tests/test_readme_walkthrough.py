"""The README's walkthrough, run as a new user runs it: the block tagged `bash walkthrough`,
as one script, in a copy of the checkout, from `pip install .` (into a new virtual
environment) to the report and the rollback.

Only the ports are changed (to free ones, so the test runs beside anything), and the
admin address follows the admin port through `VLLM_CUTOVER_ADMIN_URL`, which the client
commands read when no `--admin-url` is given. Every process the script starts is in one
session, killed at the end whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.servers import free_port
from tests.test_readme_commands import FENCE, WALKTHROUGH

REPO_ROOT = Path(__file__).resolve().parents[1]
PORTS = (9001, 9002, 9003, 8080, 8001)  # the walkthrough's: engines, proxy, admin
NOT_COPIED = (".git", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
              ".ruff_cache", ".pytest_cache", ".venv", "out")


def walkthrough(markdown: str) -> str:
    blocks = [b.group(3) for b in FENCE.finditer(markdown)
              if b.group(1) == "bash" and WALKTHROUGH in b.group(2).split()]
    assert len(blocks) == 1, f"README.md has {len(blocks)} walkthrough blocks, not one"
    return blocks[0]


def test_the_walkthrough_is_the_promised_story() -> None:
    """It goes from pip install through sims, the proxy, load, an adopt-mode cutover and
    the report to a rollback (what issue 34 asked a newcomer to be walked through), in
    about 20 lines."""
    script = walkthrough((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    lines = [line for line in script.splitlines() if line.strip()]
    assert len(lines) <= 20, len(lines)
    order = ["pip install", "vllm-cutover sim", "vllm-cutover proxy", "vllm-cutover load",
             "vllm-cutover cutover start --new-url", "vllm-cutover report",
             "vllm-cutover cutover rollback"]
    at = [script.find(step) for step in order]
    assert -1 not in at and at == sorted(at), dict(zip(order, at))
    for port in PORTS:
        assert re.search(rf"\b{port}\b", script), port


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.solo  # its cutover's gate is judged under the load it makes: alone (conftest.py)
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script = walkthrough((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    ports = {port: free_port() for port in PORTS}
    script = re.sub(r"\b(" + "|".join(map(str, PORTS)) + r")\b",
                    lambda m: str(ports[int(m.group(1))]), script)
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT, checkout, ignore=shutil.ignore_patterns(*NOT_COPIED))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VLLM_CUTOVER_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               VIRTUAL_ENV=str(venv), PYTHONUNBUFFERED="1",
               VLLM_CUTOVER_ADMIN_URL=f"http://127.0.0.1:{ports[8001]}")
    process = subprocess.Popen(["bash", "-e", "-c", script], cwd=checkout, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=900)  # minutes on a loaded 2-core host
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    shown = f"(exit {process.returncode})\n{out[-8000:]}\n--- proxy.log ---\n" + (
        (checkout / "proxy.log").read_text()[-3000:] if (checkout / "proxy.log").exists() else "")
    assert "Traceback (most recent call last)" not in out, shown
    assert process.returncode == 0, shown
    # the installed command, not this checkout's: the script ran the venv's entry point
    assert (venv / "bin" / "vllm-cutover").exists()
    # the cutover went through to the end, then back
    for step in ("warming -> shadowing", "shadowing -> promoting", "draining_old -> done",
                 "rolling_back -> rolled_back"):
        assert step in out, (step, shown)
    # the report judged the pair, and wrote its HTML
    assert re.search(r"^IN ONE LINE: ", out, re.MULTILINE), shown
    assert re.search(r"^VERDICT: (PASS|INCONCLUSIVE)", out, re.MULTILINE), shown
    html = (checkout / "report.html").read_text(encoding="utf-8")
    assert f"127.0.0.1:{ports[9001]}" in html and f"127.0.0.1:{ports[9002]}" in html
    # and the clients never saw a failure, through shadowing, promotion, drain and rollback
    summary = re.findall(r"^load: (\d+) requests in [\d.]+ s \([\d.]+/s\), (\d+) failed$", out,
                         re.MULTILINE)
    assert len(summary) == 2, shown
    assert summary[0] == ("20", "0"), shown
    assert int(summary[1][0]) > 500 and summary[1][1] == "0", shown
