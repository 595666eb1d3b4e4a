"""Dockerfile -> settings with source spans.

RUN/CMD/ENTRYPOINT in exec form (a JSON array: flags are items, an `sh -c` script is
read as shell) or shell form (shell text, continuations included); ENV in both
`KEY=VALUE ...` and legacy `KEY VALUE` forms; ARG defaults.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from proxy.scan.argv import Item, argv_occurrences
from proxy.scan.model import Host, KeyValueSite, Occurrence, in_group
from proxy.scan.shell import find_in_shell, is_assignment, split_commands

_INSTRUCTION = re.compile(r"[ \t]*([A-Za-z]+)[ \t]*")
_COMMANDS = frozenset({"RUN", "CMD", "ENTRYPOINT"})


@dataclass(frozen=True)
class Instruction:
    """One instruction: keyword, its arguments' span and the whole span (all lines)."""

    keyword: str
    args_start: int
    start: int
    end: int


def instructions(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions, following `\\` line continuations."""
    found: list[Instruction] = []
    pos = 0
    while pos < len(text):
        line_end = text.find("\n", pos)
        line_end = len(text) if line_end < 0 else line_end
        line = text[pos:line_end]
        match = _INSTRUCTION.match(line)
        if not line.strip() or line.lstrip().startswith("#") or match is None:
            pos = line_end + 1
            continue
        end = line_end
        while text[pos:end].rstrip(" \t\r").endswith("\\") and end < len(text):
            nxt = text.find("\n", end + 1)
            end = len(text) if nxt < 0 else nxt
        found.append(Instruction(match.group(1).upper(), pos + match.end(), pos, end))
        pos = end + 1
    return found


def _json_items(text: str, start: int, end: int) -> list[Item] | None:
    """Items of a JSON array of strings at text[start:end], or None (then shell form)."""
    decoder = json.JSONDecoder()
    i = start
    items: list[Item] = []
    while i < end and text[i] in " \t":
        i += 1
    if i >= end or text[i] != "[":
        return None
    i += 1
    while True:
        while i < end and text[i] in " \t\r\n\\":
            i += 1
        if i < end and text[i] == "]" and not items:
            return items
        if i >= end or text[i] != '"':
            return None
        try:
            value, after = decoder.raw_decode(text, i)
        except ValueError:
            return None
        if not isinstance(value, str):
            return None
        items.append(Item(i, after, value, "json", i + 1))
        i = after
        while i < end and text[i] in " \t\r\n\\":
            i += 1
        if i < end and text[i] == "]":
            return items
        if i >= end or text[i] != ",":
            return None
        i += 1


def _env_occurrences(text: str, inst: Instruction, file: Host) -> list[Occurrence]:
    commands = split_commands(text, inst.args_start, inst.end)
    words = [w for command in commands for w in command]
    if not words:
        return []
    whole = (inst.start, min(inst.end + 1, len(text)))
    if is_assignment(words[0], text):
        found = []
        for word in words:
            if not is_assignment(word, text):
                continue
            name, _, value = word.text.partition("=")
            eq = word.start + len(name)
            entry = whole if len(words) == 1 else (word.start, word.end)
            site = KeyValueSite((word.start, eq), (eq + 1, word.end), entry, "raw", "shell")
            found.append(Occurrence("env", name, value, word.start, file, site))
        return found
    first = words[0]
    if inst.keyword == "ARG":
        site = KeyValueSite((first.start, first.end), None, whole, "raw", "raw")
        return [Occurrence("env", first.text, None, first.start, file, site)]
    if len(words) < 2:
        return []
    value_start = words[1].start
    value = text[value_start:inst.end].rstrip()
    site = KeyValueSite((first.start, first.end), (value_start, value_start + len(value)),
                        whole, "raw", "raw")
    return [Occurrence("env", first.text, value, first.start, file, site)]


def find_in_dockerfile(text: str) -> list[Occurrence]:
    """All settings in a Dockerfile."""
    file = Host("file", 0, len(text), text)
    found: list[Occurrence] = []
    for inst in instructions(text):
        if inst.keyword in ("ENV", "ARG"):
            build_only = inst.keyword == "ARG"  # not in the running container's env
            found.extend(in_group(_env_occurrences(text, inst, file), (-1 if build_only else 0,)))
        elif inst.keyword in _COMMANDS:
            items = _json_items(text, inst.args_start, inst.end)
            group = (inst.start,) if inst.keyword == "RUN" else (0,)
            if items is None:
                found.extend(in_group(find_in_shell(text, file, inst.args_start, inst.end),
                                      group))
                continue

            def embed(index: int, items: list[Item] = items) -> Host:
                item = items[index]
                return Host("json_string", item.start, item.end, item.value)

            found.extend(in_group(argv_occurrences(items, file, "flow", embed), group))
    return found
