"""Progress for people: one status line rewritten in place on a terminal, plain lines elsewhere.

On a TTY the line is redrawn (carriage return, erase to the end of the line) as it
changes, and permanent lines (`say`) are printed above it. Into a pipe or a file, as
pip and docker do, the status is written as plain lines: when its key (phase, verdict)
changes, else at most one every `plain_every_s`, and the latest before each permanent
line and at the end, so a log keeps the story without a line per poll.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import TextIO

ERASE_TO_END = "\x1b[K"


class StatusLine:
    """`show` the current status, `say` a permanent line, `close` at the end."""

    def __init__(self, stream: TextIO, *, in_place: bool | None = None,
                 plain_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.in_place = stream.isatty() if in_place is None else in_place
        self.plain_every_s = plain_every_s
        self.clock = clock
        self._text = ""  # the status now
        self._key: str | None = None
        self._written = ""  # the status last written (plain) or drawn (in place)
        self._written_at = float("-inf")

    def say(self, text: str) -> None:
        if self.in_place and self._written:
            self.stream.write("\r" + ERASE_TO_END + text + "\n")
            self._draw()
        else:
            self._catch_up()
            self.stream.write(text + "\n")
        self.stream.flush()

    def show(self, text: str, key: str | None = None) -> None:
        changed_key, self._key = key != self._key, key
        self._text = text
        if text == self._written:
            return
        if self.in_place:
            self._draw()
        elif changed_key or self.clock() - self._written_at >= self.plain_every_s:
            self._write_plain(text)
        self.stream.flush()

    def close(self) -> None:
        """End the status: on a terminal it stays as the last line; plain, its last value."""
        if self.in_place and self._written:
            self.stream.write("\n")
        elif not self.in_place:
            self._catch_up()
        self._written, self._text, self._key = "", "", None
        self.stream.flush()

    def _draw(self) -> None:
        width = shutil.get_terminal_size().columns - 1
        self.stream.write("\r" + self._text[:width] + ERASE_TO_END)
        self._written = self._text

    def _catch_up(self) -> None:
        """Plain: the status as it stands, when not yet written, before what follows."""
        if self._text and self._text != self._written:
            self._write_plain(self._text)

    def _write_plain(self, text: str) -> None:
        self.stream.write(text + "\n")
        self._written, self._written_at = text, self.clock()
