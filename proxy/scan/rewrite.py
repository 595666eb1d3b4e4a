"""Apply planned edits to a file's text, checking that each encoded host still decodes
to what was meant (pure: text in, text out).

Edits of a YAML scalar are mapped onto its raw text character by character, so the
scalar keeps its style and line breaks; when that does not read back as intended the
scalar is rewritten whole, double-quoted; when even that fails (a block scalar) the
setting is left alone and reported as not fixed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from proxy.scan.edits import apply_edits
from proxy.scan.model import Edit, Host, Occurrence
from proxy.scan.yaml_finder import parse_documents, value_at

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """The local edits (host coordinates) that fix one occurrence."""

    occurrence: Occurrence
    edits: tuple[Edit, ...]


def _align(decoded: str, raw: str) -> list[int] | None:
    """For each decoded character, its index in the raw text (folding allowed)."""
    mapping: list[int] = []
    j = 0
    for ch in decoded:
        while j < len(raw) and raw[j] != ch and not (ch == " " and raw[j] == "\n"):
            j += 1
        if j >= len(raw):
            return None
        mapping.append(j)
        j += 1
    return mapping


def _inner_start(text: str, host: Host) -> int:
    if host.style in ("'", '"'):
        return host.start + 1
    if host.style in ("|", ">"):
        newline = text.find("\n", host.start, host.end)
        return host.end if newline < 0 else newline + 1
    return host.start


def file_offset(text: str, occ: Occurrence) -> int:
    """Where an occurrence's name sits in the file (its host may be an encoded string)."""
    host = occ.host
    if host.kind == "file":
        return occ.offset
    inner = host.start + 1 if host.kind == "json_string" else _inner_start(text, host)
    mapping = _align(host.decoded, text[inner:host.end])
    if mapping is None or occ.offset >= len(mapping):
        return host.start
    return inner + mapping[occ.offset]


def _fragment(style: str | None, new: str) -> str:
    if style == '"':
        return json.dumps(new)[1:-1]
    if style == "'":
        return new.replace("'", "''")
    return new


def _mapped(text: str, host: Host, local: Sequence[Edit]) -> list[Edit] | None:
    """Edits of a YAML scalar's value mapped onto its raw span in the file."""
    inner = _inner_start(text, host)
    mapping = _align(host.decoded, text[inner:host.end])
    if mapping is None:
        return None
    out = []
    for edit in local:
        if edit.start < len(mapping):
            start = inner + mapping[edit.start]
        else:
            start = inner + (mapping[-1] + 1 if mapping else 0)
        end = inner + mapping[edit.end - 1] + 1 if edit.end > edit.start else start
        out.append(Edit(start, end, _fragment(host.style, edit.text)))
    return out


def _whole(host: Host, local: Sequence[Edit]) -> list[Edit] | None:
    if host.style in ("|", ">"):
        return None
    new = apply_edits(host.decoded, list(local))
    encoded = json.dumps(new) if host.kind == "json_string" or host.style != "'" else (
        "'" + new.replace("'", "''") + "'")
    return [Edit(host.start, host.end, encoded)]


def _file_edits(text: str, host: Host, local: Sequence[Edit], whole: bool
                ) -> list[Edit] | None:
    if host.kind == "file":
        return list(local)
    if host.kind == "json_string" or whole:
        return _whole(host, local)
    return _mapped(text, host, local)


def apply_plans(text: str, plans: Sequence[Plan], yaml_file: bool
                ) -> tuple[str, list[Plan]]:
    """The fixed text and the plans that made it in (the others are left out)."""
    groups: dict[Host, list[Plan]] = {}
    for plan in plans:
        groups.setdefault(plan.occurrence.host, []).append(plan)
    file_edits: list[Edit] = []
    applied: list[Plan] = []
    for host, group in groups.items():
        local = [e for plan in group for e in plan.edits]
        for whole in (False, True) if host.kind == "yaml_scalar" else (False,):
            mapped = _file_edits(text, host, local, whole)
            if mapped is None:
                continue
            if host.kind == "yaml_scalar" and value_at(apply_edits(text, mapped), host.path) \
                    != apply_edits(host.decoded, local):
                continue
            file_edits.extend(mapped)
            applied.extend(group)
            break
    try:
        new_text = apply_edits(text, file_edits)
    except ValueError as err:
        log.warning("edits overlap, nothing fixed: %s", err)
        return text, []
    if yaml_file and not _parses(new_text):
        return text, []
    return new_text, applied


def _parses(text: str) -> bool:
    try:
        parse_documents(text)
    except yaml.YAMLError:
        return False
    return True
