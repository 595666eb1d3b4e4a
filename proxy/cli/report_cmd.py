"""`vllm-cutover report`: summarise the proxy's records (terminal, JSON, offline HTML)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from proxy.cli.gate_args import add_gate_arguments, gate_criteria
from proxy.exitcodes import Exit

if TYPE_CHECKING:
    from proxy.evidence.window import EvidenceWindow


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        examples=[
            "vllm-cutover report --db records.db --html report.html",
            ("vllm-cutover report --db records.db --state-file "
             "records.db.state.json --json"),
        ],
        help="summarise recorded comparisons: verdict, token match, latency (text/JSON/HTML)",
        description=(
            "Read the SQLite records written by `vllm-cutover proxy --db PATH` and print the "
            "verdict with its reasons, token match rates against the baseline noise and the "
            "latency of old vs new. --html writes a self-contained report with plots."
        ),
    )
    parser.add_argument("--db", required=True, metavar="PATH", help="the proxy's SQLite file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--html", metavar="OUT.html", help="also write the offline HTML report")
    window = parser.add_argument_group(
        "one cutover's evidence (records since its start between exactly its old and new "
        "versions, labelled old/new whichever served clients)")
    window.add_argument("--since", type=float, metavar="UNIX", help="the cutover's start")
    window.add_argument("--old-url", metavar="URL", help="the old version's backend URL")
    window.add_argument("--new-url", metavar="URL", help="the new version's backend URL")
    window.add_argument("--baseline-url", metavar="URL",
                        help="the old version's second copy (old-vs-old noise)")
    window.add_argument("--state-file", metavar="PATH",
                        help="read the window from the proxy's state file (its cutover)")
    window.add_argument("--all", action="store_true", dest="pool",
                        help="judge every record as one, even of several backend pairs "
                             "(not one comparison: the report says so); by default a file "
                             "of several pairs is judged on the newest, the others named")
    add_gate_arguments(parser, "promotion gate (same criteria as the proxy's)")
    parser.set_defaults(func=_run)


def _window(args: argparse.Namespace) -> EvidenceWindow | None:
    """The evidence window the arguments name (None: every record); ValueError quoting."""
    from proxy.evidence.window import EvidenceWindow
    from proxy.mirror.config import normalize_backend_url

    given = {"--since": args.since, "--old-url": args.old_url, "--new-url": args.new_url,
             "--baseline-url": args.baseline_url}
    named = [flag for flag, value in given.items() if value is not None]
    if args.state_file is not None:
        if named:
            raise ValueError(f"--state-file gives the window: leave out {', '.join(named)}")
        from proxy.report.load import window_from_state

        return window_from_state(args.state_file)
    if not named:
        return None
    missing = [flag for flag in ("--since", "--old-url", "--new-url") if given[flag] is None]
    if missing:
        raise ValueError(f"a cutover's evidence needs {', '.join(missing)} too")
    return EvidenceWindow(
        args.since, normalize_backend_url(args.old_url, "--old-url"),
        normalize_backend_url(args.new_url, "--new-url"),
        normalize_backend_url(args.baseline_url, "--baseline-url")
        if args.baseline_url is not None else None)


def _run(args: argparse.Namespace) -> int:
    from proxy.report.build import ReportInputError, write_report
    from proxy.statefile import StateFileError

    try:
        criteria = gate_criteria(args)
        window = _window(args)
        if window is not None and args.pool:
            raise ValueError("--all pools every record: leave out the window flags")
        rendered = write_report(args.db, as_json=args.json, html_path=args.html,
                                criteria=criteria, window=window, pool=args.pool)
    except (ReportInputError, StateFileError, ValueError, OSError) as exc:
        print(f"vllm-cutover report: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    sys.stdout.write(rendered)
    if args.html and not args.json:
        print(f"HTML report: {args.html}")
    return 0
