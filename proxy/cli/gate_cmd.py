"""`vllm-cutover gate`: the promotion verdict as an exit code (Argo Rollouts `job`, CI).

From one sidecar (`--url`, its admin API) or from every sidecar at once through
Prometheus (`--prometheus`, the fleet verdict). Exit codes: `proxy.exitcodes`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import urllib.request
from typing import Any

from proxy import boundedhttp
from proxy.cli.gate_args import add_gate_arguments, gate_criteria
from proxy.cli.proxy_cmd import (
    ADMIN_URL_ENV,
    DEFAULT_ADMIN_PORT,
    GATE_TOKEN_ENV,
    TOKEN_ENV,
    default_admin_url,
)
from proxy.credentials import redact
from proxy.exitcodes import Exit

VERDICT_EXIT = {"pass": Exit.OK, "fail": Exit.FAIL, "inconclusive": Exit.INCONCLUSIVE}


class NoVerdict(RuntimeError):
    """No gate answer to judge: `code` is UNREACHABLE, or REFUSED for a refused token."""

    def __init__(self, message: str, code: Exit = Exit.UNREACHABLE) -> None:
        super().__init__(message)
        self.code = code
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a gate answer is a few KiB


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gate",
        examples=[
            "vllm-cutover gate --admin-url http://sidecar:8001",
            ("vllm-cutover gate --prometheus http://prometheus:9090 "
             "--window 30m"),
        ],
        help="the promotion verdict as an exit code: one sidecar or the fleet via Prometheus",
        description=(
            "Ask one sidecar's gate (--admin-url) or compute the fleet's verdict from every "
            "sidecar's metrics in Prometheus (--prometheus). The reasons go to stdout."
        ),
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--admin-url", "--url", dest="url", metavar="URL",
                        help="a sidecar's admin URL, e.g. http://sidecar:8001 (asks "
                             "/admin/gate/analysis; its gate criteria apply; default without "
                             f"--prometheus: env {ADMIN_URL_ENV}, else "
                             f"http://127.0.0.1:{DEFAULT_ADMIN_PORT})")
    source.add_argument("--prometheus", metavar="URL",
                        help="a Prometheus URL, e.g. http://prometheus:9090: the verdict over "
                             "every sidecar --selector matches, with the criteria below")
    parser.add_argument("--token", metavar="T",
                        help=f"bearer token for --url (default: env {GATE_TOKEN_ENV}, then "
                             f"{TOKEN_ENV}); for --prometheus, sent to Prometheus if given")
    parser.add_argument("--selector", default='{job="vllm-cutover"}', metavar="SEL",
                        help="the sidecars' series in Prometheus (default %(default)s)")
    parser.add_argument("--window", metavar="DURATION",
                        help="judge the increase over this Prometheus duration (e.g. 30m); "
                             "default: the counters as they stand (since each sidecar started)")
    parser.add_argument("--min-targets", type=int, default=1, metavar="N",
                        help="fewer sidecars scraped (up == 1) than N: at best inconclusive "
                             "(default %(default)s)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="per HTTP request (default %(default)s)")
    parser.add_argument("--json", action="store_true",
                        help="print the verdict as JSON (as /admin/gate/analysis answers)")
    add_gate_arguments(parser, "criteria for --prometheus (--url uses the sidecar's own)")
    parser.set_defaults(func=_run)


def _from_sidecar(args: argparse.Namespace) -> dict[str, Any]:
    """The sidecar's /admin/gate/analysis answer; NoVerdict when there is none."""
    token = args.token or os.environ.get(GATE_TOKEN_ENV) or os.environ.get(TOKEN_ENV)
    url = args.url.rstrip("/") + "/admin/gate/analysis"
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        status, raw = boundedhttp.get(request, args.timeout, MAX_ANSWER_BYTES)
    except (boundedhttp.Unreachable, boundedhttp.AnswerOverLimit) as exc:
        raise NoVerdict(str(exc)) from None
    if status != 200:
        detail = raw[:500].decode("utf-8", "replace")
        raise NoVerdict(f"{url} answered {status}: {detail}",
                        Exit.REFUSED if status in (401, 403) else Exit.UNREACHABLE)
    try:
        result = boundedhttp.json_answer(raw, url)
    except ValueError as exc:
        raise NoVerdict(f"{exc}: {raw[:200]!r}") from None
    return _checked(result, url)


def _checked(result: Any, source: str) -> dict[str, Any]:
    """A gate answer with the fields this command reads; NoVerdict else."""
    if not isinstance(result, dict) or result.get("verdict") not in (
            "pass", "fail", "inconclusive"):
        raise NoVerdict(f"no verdict in the answer of {source}: {str(result)[:300]}")
    reasons, samples = result.get("reasons", []), result.get("samples", 0)
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons) \
            or isinstance(samples, bool) or not isinstance(samples, int):
        raise NoVerdict(f"the answer of {source} has unreadable reasons or samples: "
                           f"{str(result)[:300]}")
    return result


def _from_prometheus(args: argparse.Namespace) -> dict[str, Any]:
    """The fleet verdict; ValueError for bad arguments, NoVerdict when Prometheus fails."""
    from proxy.fleet.judging import fleet_verdict, read_evidence
    from proxy.fleet.prometheus import PrometheusClient, PrometheusUnavailable
    from proxy.fleet.promql import FleetQueries, parse_selector, parse_window
    from proxy.gate.verdict import analysis_body

    if args.min_targets < 0:
        raise ValueError(f"--min-targets must be >= 0, got {args.min_targets!r}")
    criteria = gate_criteria(args)
    queries = FleetQueries(parse_selector(args.selector), parse_window(args.window))
    client = PrometheusClient(args.prometheus, args.timeout, args.token)
    try:
        evidence = read_evidence(client, queries)
        return analysis_body(fleet_verdict(evidence, criteria, args.min_targets))
    except PrometheusUnavailable as exc:
        raise NoVerdict(str(exc)) from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        # Series without the labels the fleet queries put on them: not our sidecars' data.
        raise NoVerdict(f"{args.prometheus} answered series this command cannot read "
                           f"({type(exc).__name__}: {exc})") from None


def _run(args: argparse.Namespace) -> int:
    try:
        if not 0 < args.timeout < math.inf:
            raise ValueError(f"--timeout must be a number of seconds > 0, got {args.timeout!r}")
        if args.prometheus is None and args.url is None:
            args.url = default_admin_url()
        result = _from_sidecar(args) if args.url else _from_prometheus(args)
    except ValueError as exc:
        print(f"vllm-cutover gate: {redact(str(exc))}", file=sys.stderr)
        return Exit.BAD_INPUT
    except NoVerdict as exc:
        print(f"vllm-cutover gate: no verdict: {redact(str(exc))}", file=sys.stderr)
        return exc.code
    verdict = result["verdict"]
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print(f"verdict: {verdict} ({result.get('samples', 0)} deterministic requests compared)")
        for reason in result.get("reasons", []):
            print(f"  {reason}")
    return VERDICT_EXIT[verdict]
