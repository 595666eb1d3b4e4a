"""Scan paths for deprecated FP4 settings and optionally fix them in place.

The I/O edge of the scanner: walks the paths, reads each file once, runs the pure
finders and matcher, and with `fix` writes the rewritten text after keeping a backup.
A fix is kept only when a re-scan of the new text no longer finds what it fixed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.scan.files import (
    FileKind,
    decode,
    is_binary,
    iter_files,
    kind_of,
    read_head,
    write_with_backup,
)
from proxy.scan.findings import Finding, Translate, scan_text
from proxy.scan.rewrite import apply_plans
from proxy.scan.undecodable import masked_text, shown, unmasked

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 5_000_000


@dataclass(frozen=True)
class Skipped:
    """A file the scan did not read, and why: the scan is incomplete."""

    path: str
    why: str

    def to_json(self) -> dict[str, Any]:
        """A row shaped like a finding's, with status "skipped" and the reason."""
        return {"file": self.path, "line": None, "column": None, "kind": None, "name": None,
                "value": None, "fix": None, "reason": self.why, "status": "skipped",
                "note": "not read: this file was not scanned"}


@dataclass(frozen=True)
class FileResult:
    """What one file held, and what --fix did to it."""

    path: str
    findings: tuple[Finding, ...]
    fixed: tuple[Finding, ...] = ()
    backup: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class ScanReport:
    files: tuple[FileResult, ...]
    scanned: int
    errors: tuple[str, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = field(default_factory=tuple)
    skipped: tuple[Skipped, ...] = field(default_factory=tuple)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings]

    @property
    def fixed(self) -> list[Finding]:
        return [f for r in self.files for f in r.fixed]


def scan_file(path: Path, kind: FileKind, original: bytes, translate: Translate, fix: bool
              ) -> FileResult:
    """Scan (and with `fix` rewrite) one file whose bytes were read as `original`."""
    label = str(path)
    text = decode(original)
    masked, mask = masked_text(text)
    try:
        results = [(shown(f, mask), p) for f, p in scan_text(label, kind, masked, translate)]
    except yaml.YAMLError as err:
        why = f"not valid YAML ({getattr(err, 'problem', None) or err}): edit by hand"
        found = tuple(replace(shown(f, mask), status="manual", note=why)
                      for f, _ in scan_text(label, "template", masked, translate))
        return FileResult(label, found, error=None if found else f"{label}: {why}")
    findings = tuple(f for f, _ in results)
    plans = [p for _, p in results if p is not None]
    if not fix or not plans:
        return FileResult(label, findings)
    new_masked, applied = apply_plans(masked, plans, kind == "yaml")
    new_text = unmasked(new_masked, mask, text)
    if not applied:
        return FileResult(label, findings, error=f"{label}: the fixes could not be placed "
                                                 "safely; left unchanged")
    if new_text == text:
        return FileResult(label, findings)
    left = [f for f, _ in scan_text(label, kind, new_masked, translate)]
    done = [f for f, p in results if p is not None and p in applied]
    not_applied = sum(f.status == "fixable" for f, p in results if p not in applied)
    if new_text is None or sum(f.status == "fixable" for f in left) > not_applied:
        log.warning("%s: the rewrite did not remove what it fixed; file left as it was", label)
        return FileResult(label, findings, error=f"{label}: could not fix safely, left unchanged")
    try:
        backup = write_with_backup(path.resolve(), original, new_text)
    except OSError as err:
        return FileResult(label, findings, error=f"{label}: cannot write the fix ({err})")
    return FileResult(label, findings, tuple(done), str(backup))


def _read(path: Path, explicit: bool, max_file_bytes: int
          ) -> tuple[FileKind | None, bytes, str | None]:
    """(kind, bytes, None) for a file to scan, (None, b"", None) for one of no kind the
    scanner reads, (None, b"", why) for one it cannot read."""
    try:
        head = read_head(path)
        kind = kind_of(path, head) or ("shell" if explicit and not is_binary(head) else None)
        if kind is None:
            return None, b"", "binary, not a text file" if explicit else None
        size = path.stat().st_size
        if size > max_file_bytes:
            return None, b"", f"{size} bytes, over the {max_file_bytes}-byte limit"
        return kind, path.read_bytes(), None
    except OSError as err:
        return None, b"", f"cannot read ({err.strerror or err})"


def scan_paths(paths: Sequence[Path], translate: Translate, *, fix: bool = False,
               max_file_bytes: int = MAX_FILE_BYTES) -> ScanReport:
    """Scan files and directories (walked, skipping VCS/dependency dirs and binaries)."""
    results: list[FileResult] = []
    errors: list[str] = []
    warnings: list[str] = []
    skipped: list[Skipped] = []
    scanned = 0
    for root in paths:
        explicit = not root.is_dir()
        for path, why in iter_files(root):
            kind, data, why = (None, b"", why) if why else _read(path, explicit, max_file_bytes)
            if why is not None:
                skipped.append(Skipped(str(path), why))
            if kind is None:
                continue
            scanned += 1
            result = scan_file(path, kind, data, translate, fix)
            if result.error:
                (errors if explicit or result.findings else warnings).append(result.error)
            if result.findings or result.error:
                results.append(result)
    return ScanReport(tuple(results), scanned, tuple(errors), tuple(warnings), tuple(skipped))
