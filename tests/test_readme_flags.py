"""Every flag of every `vllm-cutover` subcommand is documented in README.md.

The parser tree is the CLI's own (`proxy.cli.build_parser`), walked through nested
subcommands (`cutover start`, ...), so a flag added anywhere is checked without a list
kept here.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from proxy.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def flags(parser: argparse.ArgumentParser,
          path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(subcommand path, option string) for every option of `parser` and its subparsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from flags(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            for option in action.option_strings:
                yield path, option


def in_text(option: str, text: str) -> bool:
    """`option` as a whole flag (`--seed` is not found inside `--seed-file`)."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_the_walk_reaches_nested_subcommands():
    found = set(flags(build_parser()))
    assert (("cutover", "start"), "--new-image") in found
    assert ((), "--log-level") in found and (("proxy",), "--admin-port") in found
    assert not any(option in {"-h", "--help"} for _, option in found)


def test_whole_flag_match():
    assert in_text("--seed", "use `--seed N`.") and not in_text("--seed", "`--seed-file`")
    assert not in_text("--port", "--admin-port 9090")


def test_every_flag_of_every_subcommand_is_in_the_readme():
    text = README.read_text()
    missing = sorted({f"{' '.join(('vllm-cutover', *path))} {option}"
                      for path, option in flags(build_parser()) if not in_text(option, text)})
    assert missing == [], "document these flags in README.md:\n" + "\n".join(missing)
