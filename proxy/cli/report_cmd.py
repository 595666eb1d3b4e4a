"""`vllm-cutover report`: summarise the proxy's records (terminal, JSON, offline HTML)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
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
    parser.add_argument(
        "--min-samples",
        type=int,
        default=None,
        metavar="N",
        help="gate criterion: deterministic comparisons needed for a verdict (default: gate's)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from proxy.report.build import ReportInputError, write_report

    try:
        rendered = write_report(
            args.db, as_json=args.json, html_path=args.html, min_samples=args.min_samples
        )
    except (ReportInputError, ValueError, OSError) as exc:
        print(f"vllm-cutover report: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(rendered)
    if args.html and not args.json:
        print(f"HTML report: {args.html}")
    return 0
