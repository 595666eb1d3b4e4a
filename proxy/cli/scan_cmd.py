"""`vllm-cutover scan PATH... [--target-version V] [--fix] [--json]`.

Finds deprecated vLLM FP4 flags, env vars and config keys in deployment files and
prints the fix for the target version (any release: one outside the launcher's tables is
handled as `launch` handles it). Exit codes: 0 nothing found (or everything
fixed with --fix), 1 findings remain, 2 bad input (missing path, bad option value) or a
file it could not read (unless --allow-skipped).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from proxy.exitcodes import Exit
from proxy.launcher.releases import NEWEST

DEFAULT_TARGET = f"{NEWEST.major}.{NEWEST.minor}"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scan",
        examples=[
            "vllm-cutover scan deploy/ --target-version 0.32",
            "vllm-cutover scan deploy/ --fix --bump-image",
        ],
        help="find deprecated FP4 flags/env vars/config keys in deployment files",
        description=(
            "Scan shell scripts, Dockerfiles, compose and Kubernetes YAML, env files and "
            "vLLM config YAML for FP4 settings that the target vLLM version no longer "
            "accepts, and print the fix. Exit 1 when anything is found, 2 when a file "
            "could not be read."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    parser.add_argument("--target-version", default=DEFAULT_TARGET, metavar="V",
                        help="vLLM version to upgrade to (default: %(default)s)")
    parser.add_argument("--strict-versions", action="store_true",
                        help="refuse a target outside the launcher's tables (exit 3) instead "
                             "of giving the newest known forms (default: off)")
    parser.add_argument("--policy", choices=("migrate", "preserve"), default="migrate",
                        help="migrate: follow the upgrade guide; preserve: nearest "
                             "equivalent of the old setting (default: %(default)s)")
    parser.add_argument("--compute-capability", metavar="MAJOR.MINOR", default=None,
                        help="GPU compute capability of the target as nvidia-smi prints "
                             "it, e.g. 10.0; a bare 10 means 10.0 (default: unknown)")
    parser.add_argument("--fix", action="store_true",
                        help="rewrite files in place, keeping FILE.bak backups")
    parser.add_argument("--bump-image", action="store_true",
                        help="with --fix: where a file pins a vLLM image (or vllm==) older "
                             "than the target, move the pin to the target in the same edit; "
                             "without it such a file's flags are not rewritten (default: off)")
    parser.add_argument("--json", action="store_true",
                        help="print findings (and skipped files) as JSON")
    parser.add_argument("--allow-skipped", action="store_true",
                        help="exit 0 even when files could not be read (they are still "
                             "named); by default a skipped file leaves the scan inconclusive (exit 2)")
    parser.add_argument("--max-file-bytes", type=_positive_int, default=None, metavar="N",
                        help="files larger than this are skipped, not read (default: 5000000)")
    parser.set_defaults(func=_run)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes, got {text!r}")
    return int(text)


def _outside(target: str, found: bool) -> str:
    """The line for a target outside the tables, with or without findings."""
    from proxy.launcher.outside import placed_by_ranges, translated_forward, unchanged
    from proxy.launcher.versions import coverage, parse_version

    if not found:
        return unchanged(target, "so nothing needs a change")
    if coverage(parse_version(target)) == "older":
        return placed_by_ranges(target)
    return translated_forward(target, f"at start the launcher asks vLLM {target}'s own parser "
                              "about them (exit 3 if it rejects them)")


def _run(args: argparse.Namespace) -> int:
    from proxy.launcher.capabilities import parse_capability
    from proxy.launcher.versions import check_supported, coverage, parse_version, release_of
    from proxy.scan.rules_bridge import make_translate
    from proxy.scan.scanner import MAX_FILE_BYTES, ImageCheck, scan_paths
    from proxy.scan.undecodable import printable

    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"vllm-cutover scan: no such file or directory: {', '.join(missing)}",
              file=sys.stderr)
        return Exit.BAD_INPUT
    try:
        capability = (None if args.compute_capability is None
                      else parse_capability(args.compute_capability))
        target = parse_version(args.target_version)
        if args.strict_versions:
            check_supported(target)
        translate = make_translate(args.target_version, args.policy, capability)
        images = ImageCheck(release_of(target), bump=args.bump_image)
    except ValueError as err:
        print(f"vllm-cutover scan: {err}", file=sys.stderr)
        return Exit.BAD_INPUT
    if args.bump_image and not args.fix:
        print("vllm-cutover scan: --bump-image needs --fix", file=sys.stderr)
        return Exit.BAD_INPUT
    report = scan_paths(paths, translate, fix=args.fix,
                        max_file_bytes=args.max_file_bytes or MAX_FILE_BYTES, images=images)
    fixed = set(map(id, report.fixed))
    remaining = [f for f in report.findings if id(f) not in fixed]
    if args.json:
        rows = [dict(f.to_json(), status="fixed" if id(f) in fixed else f.status)
                for f in report.findings] + [s.to_json() for s in report.skipped]
        shown = [{k: printable(v) if isinstance(v, str) else v for k, v in row.items()}
                 for row in rows]
        json.dump(shown, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for finding in report.findings:
            mark = " [fixed]" if id(finding) in fixed else ""
            print(printable(finding.human() + mark))
    for skipped in report.skipped:
        print(printable(f"vllm-cutover scan: skipped {skipped.path}: {skipped.why}"),
              file=sys.stderr)
    for error in report.errors:
        print(printable(f"vllm-cutover scan: {error}"), file=sys.stderr)
    for warning in report.warnings:
        print(printable(f"vllm-cutover scan: skipped {warning}"), file=sys.stderr)
    if coverage(target) != "known":
        print(f"vllm-cutover scan: {_outside(args.target_version, bool(report.findings))}",
              file=sys.stderr)
    manual = sum(f.status == "manual" for f in report.findings)
    summary = (f"{len(report.findings)} finding(s) in {len(report.files)} of {report.scanned} "
               f"file(s) for vLLM {args.target_version}; {manual} need a manual edit; "
               f"{len(report.skipped)} file(s) skipped, not read")
    if args.fix:
        backups = [r.backup for r in report.files if r.backup]
        summary += f"; fixed {len(fixed)} (backups: {', '.join(backups) or 'none'})"
    print(summary, file=sys.stderr)
    if remaining:
        return Exit.FAIL
    # a file not read leaves the scan without a verdict on it
    incomplete = report.errors or (report.skipped and not args.allow_skipped)
    return Exit.INCONCLUSIVE if incomplete else Exit.OK
