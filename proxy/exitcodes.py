"""One exit-code table for every command, so a script reads any of them the same way.

Documented once, in the README's "Exit codes"; every command's `--help` ends with
`EPILOG`. Standard library only: the launcher, which runs inside vLLM images without this
package's dependencies, uses it too.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # pass, or done as asked
    FAIL = 1  # the verdict is fail, or the command could not do what was asked
    INCONCLUSIVE = 2  # no verdict: not enough evidence yet
    BAD_INPUT = 3  # a flag, file or setting to fix; the command changed nothing
    UNREACHABLE = 4  # an engine, the admin API or Prometheus does not answer, or not usably
    REFUSED = 5  # the other side said no: a token, a state that does not allow it, a preflight
    NOT_FOUND = 127  # `launch`: the program to run does not exist (as a shell says)
    INTERRUPTED = 130  # Ctrl-C (as a shell says)


MEANING = {
    Exit.OK: "pass, or done as asked",
    Exit.FAIL: "fail: the verdict is fail, or it could not do what was asked",
    Exit.INCONCLUSIVE: "inconclusive: not enough evidence for a verdict yet",
    Exit.BAD_INPUT: "bad input: a flag, file or setting to fix (nothing changed)",
    Exit.UNREACHABLE: "cannot reach an engine, the admin API or Prometheus, or not usably",
    Exit.REFUSED: "refused: a token, a state that does not allow it, a kernel preflight",
    Exit.NOT_FOUND: "launch: the program to run does not exist",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}

EPILOG = "exit codes (the same for every command):\n" + "".join(
    f"  {int(code):<3} {text}\n" for code, text in MEANING.items())
