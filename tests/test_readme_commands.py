"""Every command README.md presents as something to type, run as a reader runs it: from
the repository root, `vllm-cutover` on PATH, on the real Docker engine where it needs one;
its exit status and the last line of its output asserted.

Which commands is a rule, so a rewritten README stays covered:
- each command of a fenced block tagged bash, sh, shell or console (lines joined at a
  trailing backslash, `# comments` dropped; in a console block only the lines after a
  `$ ` prompt, the others being output), except a block tagged `bash walkthrough`, which
  tests/test_readme_walkthrough.py runs whole, as one script;
- each inline code span of the prose that starts with `bash ` or `$ `: a command in a
  sentence, as `bash scripts/dev.sh demo-docker` is.
A synopsis is taken in its shortest form, its optional `[...]` parts dropped. Each command
is in RUNS (what it must end with) or in SKIPS (why it cannot run here); one in neither
fails `test_every_readme_command_is_run_or_skipped`, so a new command is decided on, not
forgotten.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
SHELL_TAGS = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
WALKTHROUGH = "walkthrough"  # a block so tagged is one script: tests/test_readme_walkthrough.py
INLINE = re.compile(r"`((?:bash|\$) [^`]+)`")


@dataclass(frozen=True)
class Command:
    text: str  # its shortest form, as run
    line: int  # where README.md shows it (1-based)


def _drop_comment(line: str) -> str:
    """`line` without a trailing `# comment` (a # outside quotes, after a blank)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shortest(command: str) -> str:
    """A synopsis without its optional `[...]` parts (nested or repeatable `[...]...` ones
    too), spaces collapsed."""
    previous = None
    while previous != command:
        previous, command = command, re.sub(r"\s*\[[^\[\]]*\](\.\.\.)?", "", command)
    return " ".join(command.split())


def _block_commands(tag: str, body: str, first_line: int) -> list[Command]:
    commands: list[Command] = []
    pending: list[str] = []
    start = first_line
    for offset, raw in enumerate(body.splitlines()):
        line = raw.strip()
        if not pending:
            if tag == "console":
                if not line.startswith("$ "):
                    continue  # output
                line = line[2:]
            start = first_line + offset
        line = _drop_comment(line)
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        text = " ".join([*pending, line]).strip()
        pending = []
        if text:
            commands.append(Command(shortest(text), start))
    return commands


def readme_commands(markdown: str) -> list[Command]:
    """The commands of `markdown` by the module's rule, in the order it shows them."""
    commands: list[Command] = []
    prose = markdown
    for block in FENCE.finditer(markdown):
        first_line = markdown.count("\n", 0, block.start(3)) + 1
        if block.group(1) in SHELL_TAGS and WALKTHROUGH not in block.group(2).split():
            commands += _block_commands(block.group(1), block.group(3), first_line)
        # blank the block out (keeping its lines) so its spans are not read as prose
        prose = prose[:block.start()] + re.sub(r"[^\n]", " ", block.group(0)) \
            + prose[block.end():]
    for span in INLINE.finditer(prose):
        text = span.group(1).removeprefix("$ ")
        commands.append(Command(shortest(text), prose.count("\n", 0, span.start()) + 1))
    return sorted(commands, key=lambda c: c.line)


@dataclass(frozen=True)
class Expect:
    """How a command the test runs must end: its exit status and last line of output."""

    exit_code: int
    last_line: str  # a regex the last non-empty line of output must match in full
    timeout_s: float = 60.0
    docker: bool = False  # needs a Docker engine (skipped without one, unless e2e required)
    slow: bool = False
    # A session fixture that ran this very command in a terminal (tests/conftest.py), its
    # run shared with the tests that read its output in detail; "" runs it here.
    shared: str = ""


RUNS: dict[str, Expect] = {
    # The healthy story; it may end aborted when a loaded machine stretches the tails (the
    # command still exits 0). tests/cli/test_demo_cmd.py holds the story to its details.
    "bash scripts/dev.sh demo": Expect(
        0, r"Demo finished in [\d.]+ s; cutover (done|aborted), verdict \w+, "
           r"0 client request\(s\) failed\.", timeout_s=600, slow=True, shared="readme_demo"),
    "bash scripts/dev.sh demo-docker": Expect(
        0, r"Docker demo finished in [\d.]+ s; cutover done, verdict \w+, "
           r"\d+ client requests, 0 failed\.", timeout_s=600, docker=True, slow=True),
    "vllm-cutover launch --dry-run --vllm-version 0.32.0 --compute-capability 10.0 -- vllm "
    "serve nvidia/Llama-3.1-8B-Instruct-FP4 --quantization nvfp4 --fp4-gemm-backend cutlass":
        Expect(0, r"vllm serve nvidia/Llama-3\.1-8B-Instruct-FP4 --kernel-config "
                  r"'\{\"linear_backend_per_quant\": \{\"nvfp4_w4a4\": \"\w+\"\}\}'"),
    # Exit 1: deploy/'s manifests keep an old FP4 flag on purpose (the scan's CI gate).
    "vllm-cutover scan deploy/ --target-version 0.32": Expect(
        1, r"\d+ finding\(s\) in \d+ of \d+ file\(s\) for vLLM 0\.32; .*"),
}

_SUITE = "the test suite itself, of which this test is a part (CI runs it: bash .ci/run)"
_ENGINE = ("needs the reader's running vLLM engines at the synopsis's placeholder URLs; "
           "tests/evaluate and tests/e2e run it against simulated and real vLLM")
_PROXY = ("asks a running proxy's admin API (http://127.0.0.1:8001); the demos run "
          "the cutover end to end, tests/cutover and tests/e2e every command")
SKIPS: dict[str, str] = {
    "bash scripts/dev.sh test": _SUITE,
    "bash .ci/run": _SUITE,
    'bash scripts/dev.sh test -m "not slow"': _SUITE,
    "vllm-cutover launch -- COMMAND...": "a synopsis: COMMAND is the reader's own vLLM "
                                         "command; the dry run below it is run",
    "vllm-cutover proxy --port 8080 --primary http://old:8000 --admin-port 8001 "
    '--admin-token "$TOKEN"': "a server that runs until stopped, in front of the reader's "
                              "engine (http://old:8000); tests/mirror and tests/e2e run it",
    "vllm-cutover gate": "needs a sidecar with a live gate at the default admin URL; "
                         "tests/mirror/admin run it on a socket",
    "vllm-cutover gate --prometheus http://prometheus:9090": "needs Prometheus scraping "
                                                              "sidecars; tests/fleet run it",
    "vllm-cutover cutover start --old CONTAINER --new-image IMAGE": "the reader's container "
                                                                    "and image; " + _PROXY,
    "vllm-cutover cutover start --new-url http://vllm-new:8000": _PROXY,
    "vllm-cutover cutover status": _PROXY,
    "vllm-cutover cutover promote | rollback | abort": _PROXY,
    "vllm-cutover eval record --url http://old:8000 --prompts prompts.jsonl --output "
    "golden.jsonl": _ENGINE,
    "vllm-cutover eval compare --golden golden.jsonl --url http://new:8000": _ENGINE,
    "vllm-cutover eval perplexity --url http://old:8000 --url http://new:8000 --texts "
    "texts.txt": _ENGINE,
    "vllm-cutover eval perf --url OLD --url NEW (--prompts FILE | --vllm-bench PYTHON "
    "--tokenizer PATH)": _ENGINE,
    "vllm-cutover eval memory --url OLD --url NEW": _ENGINE,
    "vllm-cutover verify --url http://new:8000": _ENGINE,
}


def test_the_rule_reads_blocks_prompts_and_inline_commands() -> None:
    markdown = textwrap.dedent("""\
        Try `bash scripts/go.sh now` or `$ tool --version`; `tool scan` is a name.
        ```bash
        tool run --a 1 \\
            [--b B] [--d D]... --c '#not a comment'   # a comment

        # only a comment
        ```
        ```console
        $ tool status
        phase done
        ```
        ```python
        print('not a command')
        ```
        ```
        untagged: not a command
        ```
        """)
    assert readme_commands(markdown) == [
        Command("bash scripts/go.sh now", 1), Command("tool --version", 1),
        Command("tool run --a 1 --c '#not a comment'", 3), Command("tool status", 9)]


def test_every_readme_command_is_run_or_skipped() -> None:
    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert any(c.text == "bash scripts/dev.sh demo-docker" for c in commands)
    unknown = [f"README.md:{c.line}: {c.text}" for c in commands
               if c.text not in RUNS and c.text not in SKIPS]
    assert not unknown, ("README.md shows commands this test neither runs nor skips; add "
                         "each to RUNS (how it must end) or SKIPS (why it cannot run here):\n"
                         + "\n".join(unknown))


def test_every_entry_is_a_readme_command() -> None:
    shown = {c.text for c in readme_commands(README.read_text(encoding="utf-8"))}
    stale = sorted((set(RUNS) | set(SKIPS)) - shown)
    assert not stale, f"no longer in README.md, drop them here: {stale}"
    assert not set(RUNS) & set(SKIPS)


def _param(command: str, expect: Expect) -> object:
    marks = [pytest.mark.e2e, pytest.mark.slow] if expect.slow else []
    if expect.docker:
        marks.append(pytest.mark.docker)
    if expect.shared:  # its run is the shared one, which the solo lane makes (conftest.py)
        marks.append(pytest.mark.solo)
    return pytest.param(command, expect, marks=marks, id=command[:60])


@pytest.mark.parametrize(("command", "expect"), [_param(c, e) for c, e in RUNS.items()])
def test_readme_command_runs(command: str, expect: Expect, request: pytest.FixtureRequest
                             ) -> None:
    if expect.docker:
        request.getfixturevalue("docker_client")  # skips (or fails, e2e required) without one
    if expect.shared:
        run = request.getfixturevalue(expect.shared)
        assert run.command == command, (run.command, command)
        _assert_ends(run.exit_code, run.screen, expect, run.shown())
        return
    # stdout and stderr in one, in the order a terminal shows them (unbuffered)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=expect.timeout_s, check=False)
    _assert_ends(done.returncode, done.stdout, expect,
                 f"$ {command}\n(exit {done.returncode})\n{done.stdout[-6000:]}")


def _assert_ends(exit_code: int, output: str, expect: Expect, shown: str) -> None:
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback (most recent call last)" not in output, shown
    assert exit_code == expect.exit_code, shown
    assert lines and re.fullmatch(expect.last_line, lines[-1].strip()), shown
