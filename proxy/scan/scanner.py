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

import yaml

from proxy.scan.files import FileKind, iter_files, kind_of, read_text, write_with_backup
from proxy.scan.findings import Finding, Translate, scan_text
from proxy.scan.rewrite import apply_plans

log = logging.getLogger(__name__)


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
    text = original.decode("utf-8")
    try:
        results = scan_text(label, kind, text, translate)
    except yaml.YAMLError as err:
        why = f"not valid YAML ({getattr(err, 'problem', None) or err}): edit by hand"
        found = tuple(replace(f, status="manual", note=why)
                      for f, _ in scan_text(label, "template", text, translate))
        return FileResult(label, found, error=None if found else f"{label}: {why}")
    findings = tuple(f for f, _ in results)
    plans = [p for _, p in results if p is not None]
    if not fix or not plans:
        return FileResult(label, findings)
    new_text, applied = apply_plans(text, plans, kind == "yaml")
    if not applied or new_text == text:
        return FileResult(label, findings)
    left = [f for f, _ in scan_text(label, kind, new_text, translate)]
    done = [f for f, p in results if p is not None and p in applied]
    not_applied = sum(f.status == "fixable" for f, p in results if p not in applied)
    if sum(f.status == "fixable" for f in left) > not_applied:
        log.warning("%s: the rewrite did not remove what it fixed; file left as it was", label)
        return FileResult(label, findings, error=f"{label}: could not fix safely, left unchanged")
    try:
        backup = write_with_backup(path.resolve(), original, new_text)
    except OSError as err:
        return FileResult(label, findings, error=f"{label}: cannot write the fix ({err})")
    return FileResult(label, findings, tuple(done), str(backup))


def scan_paths(paths: Sequence[Path], translate: Translate, *, fix: bool = False) -> ScanReport:
    """Scan files and directories (walked, skipping VCS/dependency dirs and binaries)."""
    results: list[FileResult] = []
    errors: list[str] = []
    warnings: list[str] = []
    scanned = 0
    for root in paths:
        explicit = root.is_file()
        for path in iter_files(root):
            text, data = read_text(path)
            if text is None:
                if explicit:
                    errors.append(f"{path}: not a UTF-8 text file")
                continue
            kind = kind_of(path, data[:512]) or ("shell" if explicit else None)
            if kind is None:
                continue
            scanned += 1
            result = scan_file(path, kind, data, translate, fix)
            if result.error:
                (errors if explicit or result.findings else warnings).append(result.error)
            if result.findings or result.error:
                results.append(result)
    return ScanReport(tuple(results), scanned, tuple(errors), tuple(warnings))
