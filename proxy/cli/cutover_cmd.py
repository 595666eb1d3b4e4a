"""`vllm-cutover cutover`: start, follow and steer a container cutover in the sidecar proxy.

A thin client of the proxy's admin API: the cutover itself runs inside the proxy (it owns
the routes and survives this command), so every subcommand is one or a few HTTP calls.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from typing import Any

from proxy.cli.proxy_cmd import ADMIN_URL_ENV, TOKEN_ENV, default_admin_url
from proxy.exitcodes import EPILOG, Exit

EXIT_HELP = EPILOG + """
for cutover and tune:
  1  with --wait / --watch: it ended otherwise than asked (failed, aborted,
     rolled back)
  3  also a request the proxy rejects (400, 404: a container or image that does
     not exist, 422)
  4  the proxy's admin API cannot be reached, or an engine the start names (502)
  5  a missing or wrong admin token (401), a state that does not allow it (409: a
     cutover already runs), no container driver (501), the proxy could not do it
     (other 5xx)
"""
ENDS = {"start": "done", "promote": "done", "rollback": "rolled_back", "abort": "aborted"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cutover", help="start, follow and steer a zero-downtime container cutover",
        description="Talk to the sidecar proxy's admin API, where the cutover runs: start "
                    "the new vLLM container from the old one's configuration, shadow it, "
                    "promote it when the gate passes, keep the old one as the way back.",
        epilog=EXIT_HELP)
    common = admin_parent()
    sub = parser.add_subparsers(dest="cutover_command", metavar="ACTION", required=True)
    start = sub.add_parser(
        "start", parents=[common], epilog=EXIT_HELP,
        description="Two modes. Adopt: --new-url URL judges an engine that already runs "
                    "(no Docker). Docker: --old CONTAINER --new-image IMAGE starts the new "
                    "container from the old one's configuration (the proxy runs with "
                    "--driver docker). Either way: shadow, judge, promote, drain.",
        examples=[
            "vllm-cutover cutover start --new-url http://vllm-new:8000 --wait",
            "vllm-cutover cutover start --old vllm-old --new-image vllm/vllm-openai:v0.32.0",
        ],
        help="start a cutover (checked before anything changes)")
    _start_arguments(start)
    status = sub.add_parser("status", parents=[common], epilog=EXIT_HELP,
                            examples=["vllm-cutover cutover status --watch"],
                            help="phase, old/new, verdict, samples, time left, history")
    status.add_argument("--json", action="store_true", help="print the status JSON")
    status.add_argument("--watch", action="store_true",
                        help="follow progress until the cutover ends")
    for name, text in (("promote", "make the new version primary now the gate passes"),
                       ("rollback", "make the old version primary again (after promotion)"),
                       ("abort", "stop before promotion: old stays, new is removed")):
        cmd = sub.add_parser(name, parents=[common], help=text, epilog=EXIT_HELP,
                             examples=[f"vllm-cutover cutover {name} --wait"])
        if name == "promote":
            cmd.add_argument("--force", action="store_true",
                             help="promote without waiting for the gate to pass")
        cmd.add_argument("--wait", action="store_true", help="follow it until it ends")
    parser.set_defaults(func=_run)


def admin_parent() -> argparse.ArgumentParser:
    """The flags every admin-API client subcommand takes (cutover, tune)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin-url", "--proxy-admin", dest="proxy_admin",
                        default=default_admin_url(), metavar="URL",
                        help=f"the proxy's admin API (default: env {ADMIN_URL_ENV}, else "
                             "%(default)s)")
    common.add_argument("--admin-token", metavar="T", help=f"bearer token (or env {TOKEN_ENV})")
    common.add_argument("--interval", type=float, default=1.0, metavar="S",
                        help="polling interval of --wait / --watch (default %(default)s)")
    return common


def _start_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--old", metavar="CONTAINER", help="old container: name, id or label=K=V")
    p.add_argument("--old-url", metavar="URL", help="old backend (default: the primary route)")
    p.add_argument("--new-image", metavar="IMAGE", help="image of the new container")
    p.add_argument("--new-url", metavar="URL",
                   help="adopt an already running new backend instead of starting a container")
    p.add_argument("--new-name", metavar="NAME", help="name of the new container")
    p.add_argument("--new-command", metavar="'ARGS'",
                   help="the new container's command, one shell-quoted string "
                        "(default: the old one's)")
    p.add_argument("--new-env", action="append", default=[], metavar="K=V",
                   help="set an environment variable in the new container (repeatable)")
    p.add_argument("--new-env-unset", action="append", default=[], metavar="NAME",
                   help="drop an inherited environment variable (repeatable)")
    p.add_argument("--new-gpus", metavar="0,1", help="GPU device ids for the new container")
    p.add_argument("--baseline-url", metavar="URL",
                   help="a second copy of the old version: old-vs-old noise while shadowing")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="model name the new one must serve (default: the old one's)")
    p.add_argument("--warmup-timeout", type=float, metavar="S", help=f"default {_default('warmup_timeout_s')}")
    p.add_argument("--analysis-timeout", type=float, metavar="S",
                   help="time for the gate to pass before an abort "
                        f"(default {_default('analysis_timeout_s')})")
    p.add_argument("--gate-min-samples", "--min-samples", dest="min_samples", type=int,
                   metavar="N",
                   help="new-vs-old comparisons needed to promote "
                        f"(default {_default('min_samples')})")
    p.add_argument("--analysis-delay", type=float, metavar="S",
                   help="the new one's first S seconds as a shadow do not count toward the "
                        "gate: a just-started engine is not yet at its speed "
                        f"(default {_default('analysis_delay_s')})")
    p.add_argument("--failure-limit", type=int, metavar="N",
                   help="failing gate evaluations in a row (one per second) before an abort "
                        f"or a rollback (default {_default('failure_limit')})")
    p.add_argument("--manual-promote", action="store_true",
                   help="wait for `promote` instead of promoting when the gate passes")
    p.add_argument("--post-promotion", type=float, metavar="S",
                   help="window after promotion with the gate still judged "
                        f"(default {_default('post_promotion_s')})")
    p.add_argument("--scale-down-delay", type=float, metavar="S",
                   help="wait after the old one drained before stopping it "
                        f"(default {_default('scale_down_delay_s')})")
    p.add_argument("--shutdown-grace", type=float, metavar="S",
                   help="SIGTERM to SIGKILL (default: the old --shutdown-timeout + 5, else 30)")
    p.add_argument("--remove-old", action="store_true", help="remove the old container at the end")
    p.add_argument("--keep-failed", action="store_true",
                   help="keep a new container that failed or was aborted, for inspection")
    p.add_argument("--backup-image", metavar="PATH",
                   help="`docker save` the old image to PATH before anything changes")
    p.add_argument("--wait", action="store_true", help="follow it until it ends")


def _default(field: str) -> str:
    """A start request field's default, as CutoverSpec (the one place it is set) has it."""
    from dataclasses import fields

    from proxy.cutover.spec import CutoverSpec

    value = next(f.default for f in fields(CutoverSpec) if f.name == field)
    return f"{value:g}" if isinstance(value, float) else str(value)


def start_request(args: argparse.Namespace) -> dict[str, Any]:
    """The start body from the flags (only what was given: the proxy fills defaults);
    ValueError quoting a bad value."""
    from proxy.cutover.spec import CutoverSpec

    body: dict[str, Any] = {}
    for flag in ("old", "old_url", "new_image", "new_url", "new_name", "baseline_url",
                 "served_model_name", "backup_image", "min_samples", "failure_limit"):
        if getattr(args, flag) is not None:
            body[flag] = getattr(args, flag)
    for flag in ("warmup_timeout", "analysis_timeout", "post_promotion", "scale_down_delay",
                 "shutdown_grace", "analysis_delay"):
        if getattr(args, flag) is not None:
            body[f"{flag}_s"] = getattr(args, flag)
    for flag in ("remove_old", "keep_failed"):
        if getattr(args, flag):
            body[flag] = True
    if args.manual_promote:
        body["auto_promote"] = False
    if args.new_command is not None:
        body["new_command"] = shlex.split(args.new_command)
    if args.new_gpus is not None:
        body["new_gpus"] = [g.strip() for g in args.new_gpus.split(",")]
    env = {}
    for item in args.new_env:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--new-env takes KEY=VALUE, got {item!r}")
        env[key] = value
    if env:
        body["new_env"] = env
    if args.new_env_unset:
        body["new_env_unset"] = list(args.new_env_unset)
    try:
        CutoverSpec.from_json(body)  # the proxy checks again; this catches typos offline
    except ValueError as exc:
        raise ValueError(in_flag_names(str(exc))) from None
    return body


_FIELD_WORD = re.compile(r"\b([a-z]+(?:_[a-z]+)+)\b")  # with an underscore: not English


def in_flag_names(message: str) -> str:
    """A start request's error with its field names (those with an underscore) as the
    flags that set them."""
    from proxy.cutover.spec import CutoverSpec

    flags = {name: "--" + name.removesuffix("_s").replace("_", "-")
             for name in CutoverSpec.__dataclass_fields__ if name != "auto_promote"}
    flags["min_samples"] = "--gate-min-samples"
    return _FIELD_WORD.sub(lambda m: flags.get(m.group(1), m.group(1)), message)


def _run(args: argparse.Namespace) -> int:
    from proxy.cutover.shell.client import AdminError, AdminUnreachable, CutoverClient

    token = args.admin_token or os.environ.get(TOKEN_ENV) or None
    client = CutoverClient(args.proxy_admin, token)
    action = args.cutover_command
    try:
        if action == "status":
            return _status(client, args)
        if action == "start":
            client.start(start_request(args))
        else:
            body = {"force": True} if action == "promote" and args.force else None
            client.command(action, body)
        status = client.status()
        print(f"{action}: accepted; cutover {status['id']} is {status['phase']}")
        if args.wait:
            final = _follow(client, args.interval)
            return Exit.OK if final["phase"] == ENDS[action] else Exit.FAIL
        return Exit.OK
    except KeyboardInterrupt:  # --wait / --watch only stop following; the cutover goes on
        return Exit.INTERRUPTED
    except (ValueError, AdminUnreachable, AdminError) as exc:
        return admin_failure(exc, "cutover")


def admin_failure(exc: Exception, command: str) -> int:
    """Print why an admin-API client command failed; its exit code (see EXIT_HELP)."""
    from proxy.cutover.shell.client import AdminError, AdminUnreachable

    code, message = Exit.BAD_INPUT, str(exc)  # ValueError: bad input
    if isinstance(exc, AdminUnreachable):
        code = Exit.UNREACHABLE
    elif isinstance(exc, AdminError) and exc.status == 401:
        message = (f"the admin API refused the token (401): {exc}; pass --admin-token "
                   f"or set {TOKEN_ENV}")
        code = Exit.REFUSED
    elif isinstance(exc, AdminError):
        message = f"the proxy answered {exc.status}: {exc}"
        code = (Exit.BAD_INPUT if exc.status in (400, 404, 422)
                else Exit.UNREACHABLE if exc.status in (502, 504)  # an engine it names is down
                else Exit.REFUSED)
    print(f"vllm-cutover {command}: {message}", file=sys.stderr)
    return code


def _status(client: Any, args: argparse.Namespace) -> int:
    from proxy.cutover.status import render_text

    status = client.status()
    if args.watch and status["phase"] is not None and not status["terminal"]:
        status = _follow(client, args.interval)
    if args.json:
        import json

        print(json.dumps(status, indent=1, sort_keys=True))
    else:
        sys.stdout.write(render_text(status))
    if args.watch and status["phase"] is not None:
        return Exit.OK if status["phase"] == "done" else Exit.FAIL
    return Exit.OK


def _follow(client: Any, interval_s: float) -> dict[str, Any]:
    """Print each new transition, and the progress as one line that changes in place on a
    terminal (plain lines when not), until the cutover ends."""
    from proxy.cutover.status import progress_line
    from proxy.terminal import StatusLine

    line = StatusLine(sys.stdout)
    shown_history = 0
    note, times = None, 0  # a note is printed once, then counted (plain lines only)
    try:
        while True:
            status = client.status()
            for t in status["history"][shown_history:]:
                stamp = time.strftime("%H:%M:%S", time.localtime(t["at_unix"]))
                line.say(f"{stamp}  {t['from'] or '-'} -> {t['to']}: {t['reason']}")
            shown_history = len(status["history"])
            times = times + 1 if status.get("note") == note else 1
            note = status.get("note")
            shown = status
            if note and times > 1 and not line.in_place:
                shown = {**status, "note": f"the same as above, {times} times"}
            line.show(f"          {progress_line(shown)}",
                      key=f"{status['phase']} {status.get('verdict')}")
            if status["terminal"]:
                return status
            time.sleep(interval_s)
    finally:
        line.close()
