"""`vllm-cutover tune`: race candidate engines on live traffic and promote the fastest one
that answers the same; and `tune candidates`, what `--kernels auto` would race.

A thin client of the proxy's admin API (`/admin/tune`): the race runs inside the proxy,
which mirrors its traffic, so it survives this command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from proxy.cli.cutover_cmd import EXIT_HELP, admin_failure, admin_parent
from proxy.cli.proxy_cmd import TOKEN_ENV
from proxy.cutover.shell.client import AdminError, AdminUnreachable, CutoverClient
from proxy.exitcodes import Exit


class TuneClient(CutoverClient):
    """The tune endpoints of one proxy's admin API."""

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/admin/tune")

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/admin/tune", request, timeout_s=max(self.timeout_s, 60))

    def abort(self) -> dict[str, Any]:
        return self._call("POST", "/admin/tune/abort")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune", help="race candidate engines (kernels) on live traffic, promote the best",
        description="Mirror sampled requests to several candidate engines at once, judge "
                    "each against the serving one with the promotion gate, stop the losers "
                    "early, and promote the fastest one that answers the same.",
        epilog=EXIT_HELP)
    common = admin_parent()
    sub = parser.add_subparsers(dest="tune_command", metavar="ACTION", required=True)
    start = sub.add_parser("start", parents=[common], epilog=EXIT_HELP,
                           examples=[
                               ("vllm-cutover tune start --candidate-url "
                                "cutlass=http://10.0.0.5:8000 --candidate-url "
                                "b12x=http://10.0.0.6:8000 --wait"),
                               ("vllm-cutover tune start --old vllm --candidate "
                                "cutlass='--linear-backend cutlass' --candidate "
                                "marlin='--linear-backend marlin' --new-gpus 2,3 "
                                "--new-gpus 4,5 --report-only --wait"),
                           ],
                           help="start a race: candidates that already run (--candidate-url) "
                                "or containers made from --old (--candidate)")
    start.add_argument("--candidate-url", action="append", default=[], metavar="NAME=URL",
                       help="a candidate engine that already runs (repeatable)")
    start.add_argument("--candidate", action="append", default=[], metavar="NAME='ARGS'",
                       help="a candidate container: old's configuration with these extra "
                            "engine args (replacing the flags old sets too) and leading "
                            "VAR=VALUE environment words, as `tune candidates` prints them "
                            "(repeatable; needs --old)")
    start.add_argument("--old", metavar="CONTAINER",
                       help="the serving container the candidates are made from (name, id "
                            "or label=KEY=VALUE; the proxy needs --driver docker)")
    start.add_argument("--new-image", metavar="IMAGE",
                       help="the candidates' image (default: the old container's)")
    start.add_argument("--new-gpus", action="append", default=[], metavar="2,3",
                       help="one GPU set for a candidate running at once (repeat for more)")
    start.add_argument("--parallel", type=int, metavar="N",
                       help="candidates running at once (default: one per --new-gpus set, "
                            "else all); the rest wait for a place")
    outcome = start.add_mutually_exclusive_group()
    outcome.add_argument("--promote", choices=("best",), default="best",
                         help="cut over to the winner (the default)")
    outcome.add_argument("--report-only", action="store_true",
                         help="stop at the ranking; old keeps serving")
    start.add_argument("--sample-rate", type=float, metavar="R",
                       help="share of generation requests mirrored to every candidate (1.0)")
    start.add_argument("--max-duration", type=float, metavar="S",
                       help="deadline of the race (default 1800)")
    start.add_argument("--served-model-name", metavar="NAME",
                       help="model the candidates must serve (default: old's)")
    start.add_argument("--gate", action="append", default=[], metavar="KEY=JSON",
                       help="a gate criterion for this race, e.g. min_samples=100 "
                            "(repeatable; default: the proxy's --gate-* settings)")
    start.add_argument("--cutover", action="append", default=[], metavar="KEY=JSON",
                       help="a setting of the promotion's cutover, e.g. post_promotion_s=60")
    start.add_argument("--wait", action="store_true", help="follow it until it ends")
    status = sub.add_parser("status", parents=[common], epilog=EXIT_HELP,
                            examples=[
                                "vllm-cutover tune status --watch",
                            ],
                            help="phase, winner, and each candidate's state and reason")
    status.add_argument("--json", action="store_true", help="print the status JSON")
    status.add_argument("--watch", action="store_true", help="follow it until it ends")
    report = sub.add_parser("report", parents=[common], epilog=EXIT_HELP,
                            examples=[
                                "vllm-cutover tune report",
                                "vllm-cutover tune report --json --html tune.html",
                            ],
                            help="the outcome: each candidate ranked, the winner first, and "
                                 "the winning command for the deploy file")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.add_argument("--html", metavar="FILE",
                        help="also write it as one self-contained HTML page")
    sub.add_parser("abort", parents=[common], epilog=EXIT_HELP,
                   examples=["vllm-cutover tune abort"],
                   help="stop the race; old keeps serving")
    kernels = sub.add_parser("candidates",
                             examples=[
                                 ("vllm-cutover tune candidates --vllm-version 0.32.0 "
                                  "--compute-capability 10.0"),
                             ],
        help="the NVFP4 kernel candidates of --kernels auto")
    kernels.add_argument("--kernels", choices=("auto",), default="auto",
                         help="auto: the backends the launcher's tables allow")
    kernels.add_argument("--vllm-version", required=True, metavar="V", help="target vLLM")
    kernels.add_argument("--compute-capability", required=True, metavar="X.Y",
                         help="the GPU's compute capability, e.g. 10.0 (B200), 12.0, 9.0")
    kernels.add_argument("--moe", action="store_true", help="also the NVFP4 MoE backends")
    kernels.add_argument("--json", action="store_true", help="print JSON")
    kernels.add_argument("--as-flags", action="store_true",
                         help="print them as --candidate flags for `tune start --old`")
    parser.set_defaults(func=_run)


def _pairs(items: list[str], flag: str, parse_json: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            shape = ("KEY=JSON" if parse_json else "NAME=URL" if flag == "--candidate-url"
                     else "NAME='ARGS'")
            raise ValueError(f"{flag} takes {shape}, got {item!r}")
        if parse_json:
            try:
                out[key] = json.loads(value)
            except ValueError:
                raise ValueError(f"{flag} {key}: {value!r} is not JSON") from None
        else:
            out[key] = value
    return out


def start_request(args: argparse.Namespace) -> dict[str, Any]:
    """The start body from the flags; ValueError quoting a bad value (checked offline)."""
    from proxy.tune.spec import TuneSpec

    body: dict[str, Any] = {"candidates": _candidate_list(args),
                            "promote": "none" if args.report_only else "best"}
    for flag, key in (("old", "old"), ("new_image", "new_image"), ("parallel", "parallel")):
        if getattr(args, flag) is not None:
            body[key] = getattr(args, flag)
    if args.new_gpus:
        body["new_gpus"] = [_gpu_set(text) for text in args.new_gpus]
    for flag, key in (("sample_rate", "sample_rate"), ("max_duration", "max_duration_s"),
                      ("served_model_name", "served_model_name")):
        if getattr(args, flag) is not None:
            body[key] = getattr(args, flag)
    if args.gate:
        body["gate"] = _pairs(args.gate, "--gate", parse_json=True)
    if args.cutover:
        body["cutover"] = _pairs(args.cutover, "--cutover", parse_json=True)
    TuneSpec.from_json(body)
    return body


def _candidate_list(args: argparse.Namespace) -> list[dict[str, Any]]:
    from proxy.tune.containers import CandidateArgsError, parse_extra

    if bool(args.candidate_url) == bool(args.candidate):
        raise ValueError("give --candidate-url NAME=URL (engines that run) or --candidate "
                         "NAME='ARGS' with --old (containers to make), not "
                         f"{'both' if args.candidate else 'neither'}")
    flag = "--candidate-url" if args.candidate_url else "--candidate"
    items = args.candidate_url or args.candidate
    names = [item.partition("=")[0] for item in items]
    pairs = _pairs(items, flag, parse_json=False)
    if len(pairs) != len(names):
        raise ValueError(f"{flag}: a name is given twice in {names!r}")
    if args.candidate_url:
        return [{"name": n, "url": u} for n, u in pairs.items()]
    out = []
    for name, text in pairs.items():
        try:
            extra = parse_extra(text)
        except CandidateArgsError as exc:
            raise ValueError(f"--candidate {name}: {exc}") from None
        out.append({"name": name, "args": list(extra.args), "env": dict(extra.env)})
    return out


def _gpu_set(text: str) -> list[str]:
    devices = [d.strip() for d in text.split(",")]
    if not all(devices):
        raise ValueError(f"--new-gpus takes device ids like 2,3, got {text!r}")
    return devices


def _run(args: argparse.Namespace) -> int:
    if args.tune_command == "candidates":
        return _candidates(args)
    client = TuneClient(args.proxy_admin, args.admin_token or os.environ.get(TOKEN_ENV) or None)
    try:
        if args.tune_command == "status":
            status = client.status()
            if args.watch and not status["terminal"]:
                status = _follow(client, args.interval)
            if args.json:
                print(json.dumps(status, indent=1, sort_keys=True))
            else:
                from proxy.tune.status import render_text

                sys.stdout.write(render_text(status))
            return Exit.OK if not args.watch or status["phase"] in (None, "done") else Exit.FAIL
        if args.tune_command == "report":
            return _report(client.status(), args.json, args.html)
        if args.tune_command == "start":
            status = client.start(start_request(args))
            print(f"tune {status['id']}: {status['phase']}, "
                  f"{len(status['candidates'])} candidates")
            if args.wait:
                return Exit.OK if _follow(client, args.interval)["phase"] == "done" else Exit.FAIL
            return 0
        status = client.abort()
        print(f"tune {status['id']}: {status['phase']} ({status['reason']})")
        return 0
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except (ValueError, AdminUnreachable, AdminError) as exc:
        return admin_failure(exc, "tune")


def _report(status: dict[str, Any], as_json: bool, html_path: str | None) -> int:
    from proxy.tune.report import TuneReport
    from proxy.tune.report_render import render_html, render_text

    report = TuneReport.from_status(status)
    if html_path is not None:
        try:
            with open(html_path, "w", encoding="utf-8") as out:
                out.write(render_html(report))
        except OSError as exc:
            raise ValueError(f"--html {html_path!r} cannot be written: {exc}") from None
    if as_json:
        print(json.dumps(report.as_json(), indent=1))
    else:
        sys.stdout.write(render_text(report))
    return Exit.OK


def _follow(client: TuneClient, interval_s: float) -> dict[str, Any]:
    shown = 0
    while True:
        status = client.status()
        for event in status.get("history", [])[shown:]:
            stamp = time.strftime("%H:%M:%S", time.localtime(event["at_unix"]))
            print(f"{stamp}  {event['event']}", flush=True)
        shown = len(status.get("history", []))
        if status["terminal"]:
            return status
        time.sleep(interval_s)


def _candidates(args: argparse.Namespace) -> int:
    from proxy.launcher.capabilities import parse_capability
    from proxy.launcher.versions import parse_version
    from proxy.tune.kernels import auto_candidates

    try:
        plan = auto_candidates(parse_version(args.vllm_version),
                               parse_capability(args.compute_capability), moe=args.moe)
    except ValueError as exc:
        return admin_failure(exc, "tune")
    if args.json:
        print(json.dumps(plan.as_json(), indent=1))
        return 0
    if args.as_flags:
        for c in plan.candidates:
            words = [f"{k}={v}" for k, v in c.env] + list(c.args)
            print(f"--candidate {_quoted(c.name + '=' + ' '.join(map(_quoted, words)))}")
        return 0
    print(f"vLLM {plan.release} on compute capability {args.compute_capability} "
          f"({plan.family}): {len(plan.candidates)} candidates")
    for c in plan.candidates:
        words = [f"{k}={v}" for k, v in c.env] + [_quoted(a) for a in c.args]
        print(f"  {c.name:22} {' '.join(words) or '(no kernel setting)'}")
        if c.warning:
            print(f"  {'':22} warning: {c.warning}")
    print("left out:")
    for _, reason in plan.left_out:
        print(f"  {reason}")
    return 0


def _quoted(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
