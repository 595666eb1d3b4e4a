"""Bytes that are not UTF-8 in a scanned file: kept through a scan and a fix.

A file is decoded with `surrogateescape`, so each such byte is one lone surrogate and
the file is written back byte for byte. The parsers (PyYAML refuses surrogates) read a
masked copy instead: each surrogate becomes one private-use character the file does
not contain, so every offset stays the same, and a fix puts the bytes back in order.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import chain

from proxy.scan.findings import Finding

_SURROGATE = re.compile("[\ud800-\udfff]")
_PRIVATE_USE = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE))
REPLACEMENT = "\ufffd"


def masked_text(text: str) -> tuple[str, str | None]:
    """(text the parsers accept, the mask character; None when nothing was masked)."""
    if not _SURROGATE.search(text):
        return text, None
    present = set(text)
    mask = next(chr(c) for c in chain(*_PRIVATE_USE) if chr(c) not in present)
    return _SURROGATE.sub(mask, text), mask


def unmasked(new_text: str, mask: str | None, original: str) -> str | None:
    """`new_text` with the original bytes back in the mask's places; None when a fix
    moved or removed one of them (the fix is then not safe to write)."""
    if mask is None:
        return new_text
    pieces = new_text.split(mask)
    kept = _SURROGATE.findall(original)
    if len(pieces) != len(kept) + 1:
        return None
    return "".join(piece + byte for piece, byte in zip(pieces, [*kept, ""]))


def shown(finding: Finding, mask: str | None) -> Finding:
    """A finding as printed: an undecodable byte in its text reads as U+FFFD."""
    if mask is None or mask not in f"{finding.name}{finding.value}{finding.fix}":
        return finding
    value = None if finding.value is None else finding.value.replace(mask, REPLACEMENT)
    return replace(finding, name=finding.name.replace(mask, REPLACEMENT), value=value,
                   fix=finding.fix.replace(mask, REPLACEMENT))


def printable(text: str) -> str:
    """`text` safe to print: a lone surrogate (an undecodable byte of a file name or a
    value) reads as its byte, `\\xe9`."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte decodes to
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return data.decode("utf-8", "backslashreplace")
