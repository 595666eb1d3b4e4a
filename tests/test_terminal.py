"""The progress line: rewritten in place on a terminal, a few plain lines into a pipe."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
from pathlib import Path

from proxy.terminal import ERASE_TO_END, StatusLine
from tests.terminal_run import run_in_terminal


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_in_place_redraws_one_line_and_prints_permanent_lines_above_it() -> None:
    out = io.StringIO()
    line = StatusLine(out, in_place=True)
    line.say("  -> shadowing")
    for n in range(16):
        line.show(f"samples {n}/60", key="inconclusive")
    line.say("  -> promoting")
    line.close()
    text = out.getvalue()
    assert text.count("\n") == 3  # two permanent lines and the status left at the end
    assert text.count("\r") == 16 + 2  # 16 redraws, then erase + redraw around the say
    assert text.endswith(f"\r{ERASE_TO_END}  -> promoting\n\rsamples 15/60{ERASE_TO_END}\n")
    # what a terminal shows: carriage returns overwrite, so each row is its last drawing
    rows = [row.split("\r")[-1].replace(ERASE_TO_END, "") for row in text.split("\n")]
    assert rows == ["  -> shadowing", "  -> promoting", "samples 15/60", ""]


def test_plain_writes_key_changes_every_few_seconds_and_the_latest_before_a_permanent_line(
) -> None:
    out, clock = io.StringIO(), Clock()
    line = StatusLine(out, in_place=False, plain_every_s=5.0, clock=clock)
    for n in range(16):  # four seconds of quarter-second polls
        clock.now = n * 0.25
        line.show(f"samples {n}/60", key="inconclusive")
    clock.now = 4.0
    line.show("samples 16/60 verdict pass", key="pass")
    clock.now = 9.5
    line.show("samples 17/60 verdict pass", key="pass")  # 5.5 s after the last line
    line.show("samples 18/60 verdict pass", key="pass")
    line.say("  -> promoting")
    line.show("phase promoting", key="promoting")
    line.show("phase promoting", key="promoting")
    line.close()
    assert out.getvalue().splitlines() == [
        "samples 0/60", "samples 16/60 verdict pass", "samples 17/60 verdict pass",
        "samples 18/60 verdict pass", "  -> promoting", "phase promoting"]


def test_a_tty_is_detected_and_a_pipe_is_not() -> None:
    """The same code in a child process: on a pseudo-terminal the line is redrawn in place,
    into a pipe each status becomes a plain line."""
    code = ("import sys; from proxy.terminal import StatusLine; s = StatusLine(sys.stdout); "
            "[s.show(f'n {i}', key=str(i)) for i in range(3)]; s.close()")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, check=True, timeout=60)
    assert piped.stdout == "n 0\nn 1\nn 2\n"
    run = run_in_terminal(shlex.join([sys.executable, "-c", code]), Path.cwd(), env, 60)
    assert run.exit_code == 0, run.shown()
    seen = run.written
    assert seen.count(b"\r") >= 3 and seen.count(b"\n") == 1, seen
