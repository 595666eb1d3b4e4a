"""Run a command in a pseudo-terminal, as a reader at a terminal runs it, and keep both what
was written (carriage returns and erase codes included) and what the screen ends up showing.

One run of the README's demo command serves several tests (tests/conftest.py's
`readme_demo`): the README's command test, the demo's story and its in-place progress.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ERASE = "\x1b[K"


@dataclass(frozen=True)
class TerminalRun:
    command: str
    exit_code: int
    written: bytes  # every byte, as the terminal got it
    seconds: float

    @property
    def raw(self) -> str:
        """What was written, decoded, with the terminal's "\r\n" read as "\n"."""
        return self.written.decode(errors="replace").replace("\r\n", "\n")

    @property
    def screen(self) -> str:
        """What the terminal keeps: each row is its last drawing."""
        rows = [row.split("\r")[-1].replace(ERASE, "") for row in self.raw.split("\n")]
        return "\n".join(rows)

    def shown(self, tail: int = 6000) -> str:
        return f"$ {self.command}\n(exit {self.exit_code})\n{self.screen[-tail:]}"


def run_in_terminal(command: str, cwd: Path, env: dict[str, str],
                    timeout_s: float) -> TerminalRun:
    """`command` (a bash command line) with stdout and stderr on a new pty; killed after
    `timeout_s`."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    child = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    chunks: list[bytes] = []
    try:
        while (left := timeout_s - (time.monotonic() - started)) > 0:
            if not select.select([leader], [], [], min(left, 1.0))[0]:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # every writer closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if child.poll() is None and time.monotonic() - started >= timeout_s:
            os.killpg(child.pid, signal.SIGKILL)
        code = child.wait(timeout=30)
    return TerminalRun(command, code, b"".join(chunks), time.monotonic() - started)
