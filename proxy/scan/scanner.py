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
from packaging.version import Version

from proxy.scan.edits import apply_edits
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
from proxy.scan.image import Pin, bump_edits, older, pins_beside, pins_in, why_older
from proxy.scan.rewrite import Plan, apply_plans
from proxy.scan.undecodable import masked_text, shown, unmasked
from proxy.scan.yaml_tidy import drop_emptied_env_keys

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
class ImageCheck:
    """The target the fixes are for, and whether `--fix` may bump an older vLLM pin."""

    target: Version
    bump: bool = False


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


def _image_rows(pins: list[Pin], target: Version, here: bool, fixing: bool,
                bumping: bool) -> list[Finding]:
    how = ("bump it in the same edit: scan --fix --bump-image" if here else
           f"bump vllm== there to {target} before fixing this file")
    if bumping:  # --fix --bump-image moves the pin with the flags: no manual edit
        return [Finding(p.file, p.line, p.column, "image", "vllm", p.text, p.bumped(target),
                        why_older(p, target, here), "fixable") for p in pins]
    return [Finding(p.file, p.line, p.column, "image", "vllm", p.text, p.bumped(target),
                    why_older(p, target, here), "manual",
                    ("this file's flags were not rewritten; " if fixing else "") + how)
            for p in pins]


def _held(findings: tuple[Finding, ...], pin: Pin, target: Version) -> tuple[Finding, ...]:
    why = f"not rewritten: {why_older(pin, target, True)}"
    return tuple(replace(f, status="manual", note=why) if f.status == "fixable" else f
                 for f in findings)


def scan_file(path: Path, kind: FileKind, original: bytes, translate: Translate, fix: bool,
              images: ImageCheck | None = None) -> FileResult:
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
    stale: list[Pin] = []
    if images is not None and findings:
        here = pins_in(label, masked)
        stale = older(here or pins_beside(path), images.target)
        bumping = fix and images.bump and bool(here) and bool(plans)
        rows = _image_rows(stale, images.target, bool(here), fix and bool(plans), bumping)
        if stale and not bumping:
            held = _held(findings, stale[0], images.target) if fix else findings
            return FileResult(label, tuple(sorted(held + tuple(rows), key=_place)))
        findings = tuple(sorted(findings + tuple(rows), key=_place))
    if not fix or not plans:
        return FileResult(label, findings)
    bump_to = images.target if images is not None and stale else None
    return _rewrite(path, kind, original, (text, masked, mask), results, translate,
                    findings, bump_to)


def _place(finding: Finding) -> tuple[str, int, int]:
    return finding.file, finding.line, finding.column


def _rewrite(path: Path, kind: FileKind, original: bytes, texts: tuple[str, str, Any],
             results: list[tuple[Finding, Plan | None]], translate: Translate,
             findings: tuple[Finding, ...], bump_to: Version | None) -> FileResult:
    """Apply the plans (and the image bumps); keep the result only if a re-scan agrees."""
    label = str(path)
    text, masked, mask = texts
    plans = [p for _, p in results if p is not None]
    new_masked, applied = apply_plans(masked, plans, kind == "yaml")
    if not applied:
        return FileResult(label, findings, error=f"{label}: the fixes could not be placed "
                                                 "safely; left unchanged")
    if kind == "yaml":
        new_masked = drop_emptied_env_keys(masked, new_masked)
    if bump_to is not None:
        new_masked = apply_edits(new_masked, bump_edits(new_masked, bump_to))
    new_text = unmasked(new_masked, mask, text)
    if new_text == text:
        return FileResult(label, findings)
    left = [f for f, _ in scan_text(label, kind, new_masked, translate)]
    done = [f for f, p in results if p is not None and p in applied]
    done += [f for f in findings if f.kind == "image"] if bump_to else []
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
               max_file_bytes: int = MAX_FILE_BYTES, images: ImageCheck | None = None
               ) -> ScanReport:
    """Scan files and directories (walked, skipping VCS/dependency dirs and binaries).
    With `images`, a file whose vLLM pin is older than the target is reported, and its
    flags are rewritten only together with a bump of that pin (`images.bump`)."""
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
            result = scan_file(path, kind, data, translate, fix, images)
            if result.error:
                (errors if explicit or result.findings else warnings).append(result.error)
            if result.findings or result.error:
                results.append(result)
    return ScanReport(tuple(results), scanned, tuple(errors), tuple(warnings), tuple(skipped))
