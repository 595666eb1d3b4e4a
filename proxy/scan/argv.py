"""Flags in a command given as a list (Dockerfile exec form, YAML command/args lists)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from proxy.scan.model import Host, ListSite, Occurrence, TokenStyle
from proxy.scan.shell import find_in_shell, is_flag, runs_sglang


@dataclass(frozen=True)
class Item:
    """One list item: its raw span, its value and where the value's text starts."""

    start: int
    end: int
    value: str
    style: TokenStyle
    text_start: int


def argv_occurrences(
    items: Sequence[Item],
    file: Host,
    layout: Literal["flow", "block"],
    embed: Callable[[int], Host],
) -> list[Occurrence]:
    """`--flag value`, `--flag=value` items; an item holding spaces (the script of
    `sh -c "..."`) is read as shell text through the host `embed(index)` returns."""
    found: list[Occurrence] = []
    text = file.decoded
    if runs_sglang([item.value for item in items]):
        return found
    for index, item in enumerate(items):
        word = item.value
        if any(c in word for c in " \t\n") and not word.startswith("-"):
            found.extend(find_in_shell(word, embed(index)))
            continue
        if not is_flag(word):
            continue
        nxt = items[index + 1] if index + 1 < len(items) else None
        spans = [(item.start, item.end)]
        name, value = word, None
        if "=" in word:
            name, _, value = word.partition("=")
        elif nxt is not None and not nxt.value.startswith("-"):
            value = nxt.value
            spans.append((nxt.start, nxt.end))
        line_start = text.rfind("\n", 0, item.start) + 1
        indent = text[line_start:item.start].split("-")[0]
        site = ListSite(tuple(spans), item.style, layout, indent)
        found.append(Occurrence("flag", name, value, item.text_start, file, site))
    return found
