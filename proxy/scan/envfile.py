"""Env files (`KEY=VALUE`, `export KEY=VALUE`, compose `.env`, systemd) -> settings."""

from __future__ import annotations

import re

from proxy.scan.model import Host, KeyValueSite, Occurrence

_LINE = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.]*)[ \t]*=[ \t]*(.*?)[ \t\r]*$")


def find_in_env_file(text: str) -> list[Occurrence]:
    """One occurrence per assignment line; comments and blank lines are skipped."""
    file = Host("file", 0, len(text), text)
    found: list[Occurrence] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        match = _LINE.match(body)
        if match and not body.lstrip().startswith("#"):
            name = match.group(1)
            value_start, value_end = pos + match.start(2), pos + match.end(2)
            value = match.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
                value_start, value_end = value_start + 1, value_end - 1
            elif " #" in value:  # an unquoted value ends where a comment starts
                value = value[:value.index(" #")].rstrip()
                value_end = value_start + len(value)
            site = KeyValueSite(
                name_span=(pos + match.start(1), pos + match.end(1)),
                value_span=(value_start, value_end),
                entry_span=(pos, pos + len(line)),
                name_style="raw",
                value_style="raw",
            )
            found.append(Occurrence("env", name, value, pos + match.start(1), file, site))
        pos += len(line)
    return found
