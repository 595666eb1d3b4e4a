"""What every `eval` action (and `verify`) shares: exit codes, output flags, printing.

Its own module below `eval_cmd` (record, compare) and `eval_measure` (perplexity, perf,
memory), so that neither imports the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from proxy.atomic import write_text_atomic
from proxy.credentials import redact, redact_json
from proxy.evaluate.jsonl import EngineUnreachable
from proxy.exitcodes import Exit


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("replay")
    group.add_argument("--concurrency", type=int, default=4, metavar="N",
                       help="requests in flight per engine (default %(default)s)")
    group.add_argument("--rate", type=float, default=0.0, metavar="R",
                       help="requests started per second; 0: as fast as the concurrency "
                            "allows (default %(default)s)")
    group.add_argument("--timeout", type=float, default=300.0, metavar="S",
                       help="seconds one request may take (default %(default)s)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--html", metavar="OUT.html", help="also write an HTML report (atomically)")


def fail_code(exc: Exception) -> Exit:
    """An engine that cannot be used is UNREACHABLE; any other error is the input's."""
    return Exit.UNREACHABLE if isinstance(exc, EngineUnreachable) else Exit.BAD_INPUT


def fail(command: str, exc: Exception) -> int:
    print(f"vllm-cutover eval {command}: error: {redact(str(exc))}", file=sys.stderr)
    return fail_code(exc)


def verdict_exit(verdict: str) -> int:
    return {"pass": Exit.OK, "fail": Exit.FAIL}.get(verdict, Exit.INCONCLUSIVE)


def to_json(result: Any) -> Any:
    """A typed result (a dataclass, nested ones included) as the JSON document it prints."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return result


def emit(result: Any, as_json: bool, text: str) -> None:
    """The result on stdout; an engine URL's credentials (aiohttp sends them) are not shown."""
    sys.stdout.write(json.dumps(redact_json(to_json(result)), indent=2, default=str) + "\n"
                     if as_json else redact(text))


def write_html(path: str, html: str) -> None:
    write_text_atomic(path, redact(html))
