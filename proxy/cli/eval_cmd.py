"""`vllm-cutover eval`: regression evaluation on a fixed request set before a cutover."""

from __future__ import annotations

import argparse
from typing import Any

from proxy.cli import eval_measure
from proxy.cli.eval_common import (
    add_output_arguments,
    add_replay_arguments,
    emit,
    fail,
    verdict_exit,
    write_html,
)
from proxy.cli.gate_args import add_match_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="replay a fixed request set: golden answers, perplexity, speed, memory",
        description="Prove a new vLLM on a fixed request set before live traffic reaches it.")
    sub = parser.add_subparsers(dest="eval_command", metavar="ACTION", required=True)
    _register_record(sub)
    _register_compare(sub)
    eval_measure.register(sub)


def _register_record(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record",
                       examples=[
                           ("vllm-cutover eval record --url http://old:8000 --prompts "
                            "prompts.jsonl -o golden.jsonl"),
                       ],
                       help="send a prompt set to the old engine and keep its answers",
                       description="Greedy, streamed, with token ids and top-k logprobs; "
                                   "writes the golden JSONL (atomically).")
    p.add_argument("--url", required=True, help="the old engine's base URL")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompts", metavar="FILE",
                        help="JSONL, one completions ('prompt') or chat ('messages') "
                             "request per line")
    source.add_argument("--records", metavar="DB",
                        help="the proxy's records taken with --store-text (their requests)")
    p.add_argument("-o", "--output", required=True, metavar="GOLDEN", help="golden JSONL to write")
    p.add_argument("--logprobs", type=int, default=5, metavar="K",
                   help="top-k logprobs kept per token, at most vLLM's --max-logprobs "
                        "(default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=128, metavar="N",
                   help="max_tokens of requests that set none (default %(default)s)")
    p.add_argument("--store-text", action="store_true",
                   help="also keep the answers' text (token ids and logprobs are always kept)")
    add_replay_arguments(p)
    p.set_defaults(func=_run_record)


def _register_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare",
                       examples=[
                           ("vllm-cutover eval compare --golden golden.jsonl --url "
                            "http://new:8000 --baseline-url http://old2:8000"),
                       ],
                       help="replay a golden file against the new engine and judge it",
                       description="Token match with its interval, first divergences, vLLM's "
                                   "top-k rule, output lengths (paired test), finish reasons; "
                                   "with --baseline-url judged against old-vs-old noise.")
    p.add_argument("--golden", required=True, metavar="GOLDEN", help="from `eval record`")
    p.add_argument("--url", required=True, help="the new engine's base URL")
    p.add_argument("--baseline-url", metavar="URL",
                   help="a second engine of the golden's version: old-vs-old noise")
    p.add_argument("--allow-model-mismatch", action="store_true",
                   help="compare even when the engines serve another model than the golden's, "
                        "or the baseline runs another version")
    p.add_argument("--pace", choices=("fast", "recorded"), default="fast",
                   help="fast: as the concurrency and --rate allow; recorded: the golden's "
                        "start times (default %(default)s)")
    p.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="with --pace recorded, X times faster (default %(default)s)")
    add_replay_arguments(p)
    group = p.add_argument_group("verdict")
    add_match_arguments(group, min_samples=20)
    group.add_argument("--close-counts-as-match", action="store_true",
                       help="a divergence within vLLM's top-k rule counts as a match")
    group.add_argument("--max-length-change", type=float, default=0.10, metavar="F",
                       help="largest change of total output tokens new/old before a "
                            "significant paired shift fails (default %(default)s)")
    group.add_argument("--max-finish-change", type=float, default=0.05, metavar="F",
                       help="share of requests whose finish reason may change "
                            "(default %(default)s)")
    add_output_arguments(p)
    p.set_defaults(func=_run_compare)


def _settings(args: argparse.Namespace) -> Any:
    from proxy.evaluate.replaying import ReplaySettings

    return ReplaySettings(concurrency=args.concurrency, rate=args.rate,
                          pace=getattr(args, "pace", "fast"), speed=getattr(args, "speed", 1.0),
                          timeout_s=args.timeout)


def _run_record(args: argparse.Namespace) -> int:
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.prompts import read_prompts
    from proxy.evaluate.records import read_record_requests
    from proxy.evaluate.replaying import record

    try:
        if args.logprobs < 1 or args.max_tokens < 1:
            raise ValueError(f"--logprobs and --max-tokens must be >= 1, got "
                             f"{args.logprobs!r} and {args.max_tokens!r}")
        if args.prompts is not None:
            requests = read_prompts(args.prompts, logprobs=args.logprobs,
                                    max_tokens=args.max_tokens)
        else:
            requests = read_record_requests(args.records, logprobs=args.logprobs,
                                            max_tokens=args.max_tokens)
        done = record(args.url.rstrip("/"), requests, args.output, _settings(args),
                      store_text=args.store_text)
    except (EvalInputError, ValueError) as exc:
        return fail("record", exc)
    print(f"recorded {done.requests} answers of {done.models} on vLLM {done.version} "
          f"into {done.output}")
    return 0


def _run_compare(args: argparse.Namespace) -> int:
    from proxy.cli.gate_args import match_criteria
    from proxy.evaluate.golden import read_golden
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.judge import CompareCriteria
    from proxy.evaluate.render import compare_html, compare_text
    from proxy.evaluate.replaying import compare_golden

    try:
        criteria = CompareCriteria(
            gate=match_criteria(args, CompareCriteria().gate,
                                close_counts_as_match=args.close_counts_as_match),
            max_length_change=args.max_length_change, max_finish_change=args.max_finish_change)
        golden = read_golden(args.golden)
        result = compare_golden(golden, args.url.rstrip("/"),
                                args.baseline_url.rstrip("/") if args.baseline_url else None,
                                _settings(args), criteria, args.allow_model_mismatch)
        if args.html:
            write_html(args.html, compare_html(result))
    except (EvalInputError, ValueError, OSError) as exc:
        return fail("compare", exc)
    emit(result, args.json, compare_text(result))
    return verdict_exit(result.verdict)
