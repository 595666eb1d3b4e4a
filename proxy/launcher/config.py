"""Typed configuration of one `launch`, built once by the CLI (`proxy.cli.launch_cmd`).

Everything the launch reads from its command line is here, already parsed: the capability
through the one parser, the exec prefix split as a shell would; the readers below raise
`LaunchConfigError` quoting a bad value, so the launch itself never sees one.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from proxy.launcher.capabilities import Capability, parse_capability
from proxy.launcher.rules import Policy


class LaunchConfigError(ValueError):
    """A launch option that cannot be read; the message quotes the bad value."""


@dataclass(frozen=True)
class LaunchConfig:
    """What to start and how: the user's command and the launcher's own options."""

    command: tuple[str, ...]  # the vLLM start command after `--`
    policy: Policy = "migrate"
    vllm_version: str | None = None  # None: detect for `vllm_python`
    vllm_python: str | None = None  # None: from the command, the shebang, or this one
    compute_capability: Capability | None = None  # None: detect (unless no preflight)
    exec_prefix: tuple[str, ...] = ()  # what runs bare vLLM arguments
    config_out: str | None = None  # directory for the translated --config copy
    self_test: bool = False
    preflight: bool = True
    validate: bool = True  # check the final arguments with vLLM's own parser
    report_json: str | None = None
    dry_run: bool = False
    strict_versions: bool = False  # refuse a vLLM release outside the tables


def command_words(remainder: list[str]) -> tuple[str, ...]:
    """argparse's REMAINDER without the `--` that separates it."""
    return tuple(remainder[1:] if remainder[:1] == ["--"] else remainder)


def read_capability(text: str | None) -> Capability | None:
    try:
        return None if text is None else parse_capability(text)
    except ValueError as exc:
        raise LaunchConfigError(str(exc)) from None


def read_exec_prefix(text: str | None) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text)) if text else ()
    except ValueError as exc:
        raise LaunchConfigError(f"--exec-prefix {text!r}: {exc}") from None
