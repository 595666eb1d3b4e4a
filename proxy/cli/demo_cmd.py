"""`vllm-cutover demo` (not built yet)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="(not built yet)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    print("vllm-cutover demo: not built yet", file=sys.stderr)
    return 2
