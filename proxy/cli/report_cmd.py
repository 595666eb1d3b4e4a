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
    gate = parser.add_argument_group("promotion gate (same criteria as the proxy's)")
    gate.add_argument(
        "--gate-min-samples",
        type=int,
        default=50,
        metavar="N",
        help="deterministic requests compared before a verdict (default %(default)s)",
    )
    gate.add_argument(
        "--gate-max-excess-divergence",
        type=float,
        default=0.05,
        metavar="F",
        help="allowed match-rate drop below the baseline's (default %(default)s)",
    )
    gate.add_argument(
        "--gate-min-match-rate",
        type=float,
        default=0.90,
        metavar="F",
        help="match rate needed without a baseline (default %(default)s)",
    )
    gate.add_argument(
        "--gate-require-baseline",
        action="store_true",
        help="no pass without old-vs-old noise measured on a baseline",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from proxy.compare.gate import GateCriteria
    from proxy.report.build import ReportInputError, write_report

    try:
        criteria = GateCriteria(
            min_samples=args.gate_min_samples,
            max_excess_divergence=args.gate_max_excess_divergence,
            min_match_rate=args.gate_min_match_rate,
            require_baseline=args.gate_require_baseline,
        )
        rendered = write_report(args.db, as_json=args.json, html_path=args.html, criteria=criteria)
    except (ReportInputError, ValueError, OSError) as exc:
        print(f"vllm-cutover report: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(rendered)
    if args.html and not args.json:
        print(f"HTML report: {args.html}")
    return 0
