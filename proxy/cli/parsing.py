"""The argument parser every command uses: a usage error is one short message with a
"did you mean" where a close name exists, and exit code 3 (`proxy.exitcodes`), not
argparse's 2 (which this tool's table gives to "inconclusive") and its usage block."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from proxy.exitcodes import EPILOG, Exit

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


class Formatter(argparse.HelpFormatter):
    """Text with line breaks of its own (the exit-code table, examples) kept as written,
    other text wrapped; every option's default shown where its help does not say it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # by identity and type: 0 and 0.0 are defaults worth showing, though == False
        hidden = (default is None or isinstance(default, bool) or default == []
                  or default is argparse.SUPPRESS)
        if action.option_strings and "default" not in text.lower() and not hidden:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, examples: Sequence[str] = (), **kwargs: Any) -> None:
        """`examples`: command lines shown first in the epilog, above the exit codes."""
        kwargs.setdefault("formatter_class", Formatter)
        epilog = kwargs.get("epilog") or EPILOG
        if examples:
            epilog = "examples:\n" + "".join(f"  {line}\n" for line in examples) + "\n" + epilog
        kwargs["epilog"] = epilog
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        hint = suggestion(self, message)
        self.exit(Exit.BAD_INPUT, f"{self.prog}: error: {message}{hint}\n"
                                  f"(`{self.prog} --help` lists every option)\n")


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """"; did you mean X?" for the first unknown flag or choice with a close known one."""
    choice = _INVALID_CHOICE.search(message)
    if choice:
        known = [c for action in parser._actions if action.choices
                 for c in action.choices if isinstance(c, str)]
        wrong = [choice.group(1)]
    elif message.startswith("unrecognized arguments: "):
        known = list(parser._option_string_actions)
        wrong = [word.split("=", 1)[0] for word in message.split()[2:]
                 if word.startswith("-")]
    else:
        return ""
    for word in wrong:
        close = difflib.get_close_matches(word, known, n=2, cutoff=0.6)
        if close:
            return f"; did you mean {' or '.join(close)}?"
    return ""


def chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command parser the parsed `args` went through."""
    while True:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, actions[0].dest, None) if actions and actions[0].dest else None
        if name is None or name not in actions[0].choices:
            return parser
        parser = actions[0].choices[name]
