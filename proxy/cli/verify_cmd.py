"""`vllm-cutover verify`: the post-upgrade checklist against one engine."""

from __future__ import annotations

import argparse
import sys

from proxy.cli.eval_common import add_replay_arguments, emit, fail_code
from proxy.cli.gate_args import add_match_arguments, match_criteria
from proxy.credentials import redact
from proxy.exitcodes import Exit


def _range(value: str) -> tuple[float, float]:
    low, sep, high = value.partition(":")
    try:
        pair = (float(low), float(high)) if sep else (float("nan"), float("nan"))
    except ValueError:
        pair = (float("nan"), float("nan"))
    if not 0 <= pair[0] <= pair[1] <= 100:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH percent within 0..100, got {value!r}")
    return pair


def _positive_bytes(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a number of bytes >= 1, got {value!r}")
    return number


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="post-upgrade checklist: up, version, kernel used, same tokens, metrics",
        examples=[
            ("vllm-cutover verify --url http://new:8000 --expect-version "
             "0.32.0 --golden golden.jsonl"),
        ],
        description="Each line pass / fail / n/a with the reason; exit 0 only when every "
                    "applicable line passes.")
    p.add_argument("--url", required=True, help="the engine's base URL")
    p.add_argument("--expect-version", metavar="V", help="the vLLM version /version must report")
    p.add_argument("--golden", metavar="GOLDEN",
                   help="golden file of `eval record`: old requests must give the same tokens")
    p.add_argument("--allow-model-mismatch", action="store_true",
                   help="compare with a golden of another served model name")
    p.add_argument("--launch-report", metavar="FILE",
                   help="the launcher's `--report-json`: the NVFP4 backend it asked for")
    log = p.add_mutually_exclusive_group()
    log.add_argument("--log", metavar="FILE", help="the engine's startup log")
    log.add_argument("--container", metavar="ID",
                     help="read the startup log from this container (Docker SDK)")
    p.add_argument("--log-max-bytes", type=_positive_bytes, default=None, metavar="N",
                   help="read at most the first N bytes of --log (vLLM prints what is "
                        "checked at start-up; default 256 MiB)")
    p.add_argument("--prometheus", metavar="URL",
                   help="a Prometheus scraping the engine: its target must be up with the series")
    p.add_argument("--gpu-util-range", type=_range, metavar="LOW:HIGH",
                   help="expected GPU utilisation in percent (NVML, or DCGM via --prometheus)")
    add_replay_arguments(p)
    add_match_arguments(p.add_argument_group("the golden line's verdict (as eval compare's)"),
                        min_samples=20)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from proxy.evaluate.checklist import (
        DEFAULT_LOG_MAX_BYTES,
        NoVerdict,
        VerifyOptions,
        run_checklist,
    )
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.judge import CompareCriteria
    from proxy.evaluate.replaying import ReplaySettings

    try:
        opts = VerifyOptions(
            url=args.url.rstrip("/"), expect_version=args.expect_version, golden=args.golden,
            launch_report=args.launch_report, log_path=args.log, container=args.container,
            log_max_bytes=args.log_max_bytes or DEFAULT_LOG_MAX_BYTES,
            prometheus=args.prometheus, gpu_util_range=args.gpu_util_range,
            allow_model_mismatch=args.allow_model_mismatch,
            replay=ReplaySettings(concurrency=args.concurrency, rate=args.rate,
                                  timeout_s=args.timeout),
            criteria=CompareCriteria(gate=match_criteria(args, CompareCriteria().gate)))
        result = run_checklist(opts)
    except (EvalInputError, ValueError) as exc:
        print(f"vllm-cutover verify: error: {redact(str(exc))}", file=sys.stderr)
        return fail_code(exc)
    except NoVerdict as exc:  # the engine's answers cannot be read: not usable
        print(f"vllm-cutover verify: no verdict: {redact(str(exc))}", file=sys.stderr)
        return Exit.UNREACHABLE
    width = max(len(c.name) for c in result.checks)
    text = "".join(f"{c.status.upper():5} {c.name:{width}}  {c.detail}\n"
                   for c in result.checks) + f"verdict: {result.verdict.upper()}\n"
    emit(result, args.json, text)
    return Exit.OK if result.verdict == "pass" else Exit.FAIL
