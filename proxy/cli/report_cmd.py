"""`vllm-cutover report` (not built yet)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="(not built yet)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    print("vllm-cutover report: not built yet", file=sys.stderr)
    return 2
