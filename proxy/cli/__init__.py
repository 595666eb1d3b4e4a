"""Command line: the only place that touches argparse.

Each subcommand lives in its own module here and exposes
`register(subparsers) -> None`; the module sets `func` on its parser to a
callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from proxy import __version__
from proxy.boundedhttp import AnswerOverLimit
from proxy.cli.parsing import Parser, chosen
from proxy.credentials import install_log_redaction, redact
from proxy.exitcodes import Exit

# Order is the order shown in --help.
SUBCOMMAND_MODULES = ("demo", "launch", "scan", "proxy", "sim", "load", "report", "cutover",
                      "tune", "gate", "eval", "verify")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="vllm-cutover",
        description=(
            "Upgrade vLLM serving NVFP4 models without an outage: translate old FP4 "
            "launch flags (launch, scan), shadow the new version on live traffic and "
            "compare tokens and latency (proxy, sim, report), switch over and back (cutover)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"vllm-cutover {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level on stderr (default: %(default)s)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(f"proxy.cli.{name}_cmd")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if unknown:  # told by the (sub)command that was given, with its close flag names
        chosen(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_log_redaction()
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return Exit.BAD_INPUT
    try:
        return int(args.func(args))
    except AnswerOverLimit as exc:  # a peer's answer that does not end: not usable
        command = " ".join(filter(None, (args.command, getattr(args, "eval_command", None))))
        print(f"vllm-cutover {command}: no verdict: {redact(str(exc))}", file=sys.stderr)
        return Exit.UNREACHABLE
