"""Edits that rewrite one setting where it sits (pure: occurrence in, edits out).

Every edit is in the coordinates of the occurrence's host text; `proxy.scan.rewrite`
maps edits of an encoded host (a YAML scalar, a JSON string) back into the file.
"""

from __future__ import annotations

import json
import shlex

import yaml

from proxy.scan.model import Edit, KeyValueSite, ListSite, Occurrence, TokenStyle, WordsSite

_SAFE_RAW = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,:/@%+=")


def _plain_ok(token: str, flow: bool) -> bool:
    if not token or "\n" in token:
        return False
    try:
        loaded = yaml.safe_load(f"[{token}]" if flow else f"- {token}")
    except yaml.YAMLError:
        return False
    return loaded == [token]


def encode_token(style: TokenStyle, token: str, old_raw: str = "") -> str:
    """Write `token` so it reads back as itself where `style` says it lands."""
    if style == "shell":
        quote = old_raw[:1]
        if quote in ("'", '"') and old_raw.endswith(quote) and not set(token) & set("'\"\\$`"):
            return f"{quote}{token}{quote}"
        return shlex.quote(token)
    if style == "json" or style == "yaml_double":
        return json.dumps(token)
    if style == "yaml_single":
        return "'" + token.replace("'", "''") + "'"
    if style in ("yaml_plain", "yaml_flow_plain"):
        if _plain_ok(token, style == "yaml_flow_plain"):
            return token
        return "'" + token.replace("'", "''") + "'"
    if set(token) <= _SAFE_RAW:
        return token
    return json.dumps(token)


def _remove_words(text: str, start: int, end: int) -> Edit:
    """Drop text[start:end] with the blanks (and line continuations) before it."""
    i = start
    while True:
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        if i >= 2 and text[i - 2:i] == "\\\n":
            i -= 2
            continue
        break
    if i == start or (i > 0 and text[i - 1] == "\n"):
        while end < len(text) and text[end] in " \t":
            end += 1
        i = start
    return Edit(i, end, "")


def replace_flag(occ: Occurrence, tokens: list[str]) -> list[Edit]:
    """Put `tokens` where the flag (and its value) was; [] drops it."""
    site, text = occ.site, occ.host.decoded
    if isinstance(site, WordsSite):
        if not tokens:
            return [_remove_words(text, site.start, site.end)]
        return [Edit(site.start, site.end, " ".join(shlex.quote(t) for t in tokens))]
    if not isinstance(site, ListSite):
        raise TypeError(f"not a flag site: {site!r}")
    encoded = [encode_token(site.style, t, text[site.items[0][0]:site.items[0][1]])
               for t in tokens]
    first, last = site.items[0], site.items[-1]
    if site.layout == "block":
        line_start = text.rfind("\n", 0, first[0]) + 1
        if len(encoded) == len(site.items):
            return [Edit(s, e, new) for (s, e), new in zip(site.items, encoded)]
        if not encoded:
            line_end = text.find("\n", last[1])
            return [Edit(line_start, len(text) if line_end < 0 else line_end + 1, "")]
        lines = "\n".join(f"{site.indent}- {new}" for new in encoded)
        return [Edit(line_start, last[1], lines)]
    if encoded:
        return [Edit(first[0], last[1], ", ".join(encoded))]
    before = text.rfind(",", 0, first[0])
    if before >= 0 and not text[before + 1:first[0]].strip(" \t\r\n\\"):
        return [Edit(before, last[1], "")]
    after = last[1]
    while after < len(text) and text[after] in " \t\r\n\\,":
        after += 1
    return [Edit(first[0], after, "")]


def prefix_env(occ: Occurrence, name: str, value: str) -> list[Edit] | None:
    """`NAME=VALUE ` in front of the vLLM program, dropping the flag; None if no place."""
    site = occ.site
    if not isinstance(site, WordsSite) or site.env_prefix_at is None:
        return None
    insert = Edit(site.env_prefix_at, site.env_prefix_at, f"{name}={shlex.quote(value)} ")
    return [insert, *replace_flag(occ, [])]


def set_key_value(occ: Occurrence, name: str, value: str | None) -> list[Edit] | None:
    """Rename an env var / config key and set its value; None if the value has no span."""
    site, text = occ.site, occ.host.decoded
    if not isinstance(site, KeyValueSite):
        return None
    edits = []
    if name != occ.name:
        old = text[site.name_span[0]:site.name_span[1]]
        edits.append(Edit(*site.name_span, encode_token(site.name_style, name, old)))
    if value is not None and value != occ.value:
        if site.value_span is None:
            return None
        old = text[site.value_span[0]:site.value_span[1]]
        edits.append(Edit(*site.value_span, encode_token(site.value_style, value, old)))
    return edits


def remove_entry(occ: Occurrence) -> list[Edit] | None:
    """Drop an env var / config key (whole lines where it has them alone)."""
    site, text = occ.site, occ.host.decoded
    if not isinstance(site, KeyValueSite):
        return None
    start, end = site.entry_span
    # A span that ends in blanks (`A=1 ` before the program) takes its separator with
    # it; eating the blanks before as well would overlap a neighbour's removal.
    if start > 0 and text[start - 1] != "\n" and text[end - 1] not in " \t\n":
        return [_remove_words(text, start, end)]
    return [Edit(start, end, "")]


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits (any order) to `text`."""
    out, pos = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < pos:
            raise ValueError(f"overlapping edits at offset {edit.start}")
        out.append(text[pos:edit.start])
        out.append(edit.text)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)
