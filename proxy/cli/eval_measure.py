"""`eval perplexity`, `eval perf` and `eval memory`: the measuring actions of `eval`."""

from __future__ import annotations

import argparse
from typing import Any

from proxy.cli.eval_cmd import EXIT_HELP, add_output_arguments, emit, fail, verdict_exit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perplexity", epilog=EXIT_HELP,
                       help="perplexity of the same texts on two engines, paired, with an interval",
                       description="Through the completions endpoint: prompt_logprobs where the "
                                   "engine has it, else echo + logprobs; texts cut into windows "
                                   "of the model length.")
    p.add_argument("--url", action="append", required=True, metavar="URL",
                   help="an engine; give it twice: old first, new second")
    p.add_argument("--texts", required=True, metavar="FILE",
                   help='JSONL, one {"text": "..."} per line')
    p.add_argument("--max-model-len", type=int, metavar="N",
                   help="window length in tokens (default: the smallest max_model_len the "
                        "engines report in /v1/models)")
    p.add_argument("--method", choices=("auto", "prompt_logprobs", "echo"), default="auto",
                   help="how logprobs of the text are asked for (default %(default)s: "
                        "prompt_logprobs, echo where the engine refuses it)")
    p.add_argument("--max-increase", type=float, default=0.05, metavar="F",
                   help="relative perplexity increase new/old allowed: fail when the "
                        "interval's lower bound is above, pass when its upper bound is "
                        "within (default %(default)s)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="F",
                   help="confidence of the interval (default %(default)s)")
    p.add_argument("--resamples", type=int, default=2000, metavar="N",
                   help="bootstrap resamples (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=4, metavar="N",
                   help="windows scored at once per engine (default %(default)s)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds one request may take (default %(default)s)")
    add_output_arguments(p)
    p.set_defaults(func=_run_perplexity)


def perplexity_verdict(result: dict[str, Any], max_increase: float) -> tuple[str, str]:
    delta = result["delta"]
    if delta is None:
        return "pass", "one engine: perplexity measured, nothing compared"
    old = result["results"][0]["perplexity"]
    low, high = delta["ci"]
    limit = max_increase * old
    text = (f"perplexity {old:.4g} -> {result['results'][1]['perplexity']:.4g}, delta "
            f"{delta['value']:+.4g} ({delta['confidence']:.0%} interval {low:+.4g}..{high:+.4g}); "
            f"allowed increase {limit:.4g}")
    if low > limit:
        return "fail", text
    if high <= limit:
        return "pass", text
    return "inconclusive", text


def _run_perplexity(args: argparse.Namespace) -> int:
    from proxy.atomic import write_text_atomic
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.perplexity import evaluate_perplexity, read_texts
    from proxy.evaluate.render import perplexity_html

    try:
        if len(args.url) > 2:
            raise ValueError(f"--url at most twice (old, new), got {len(args.url)}")
        if not 0 < args.confidence < 1 or args.resamples < 10 or args.max_increase < 0:
            raise ValueError(f"need 0 < --confidence < 1, --resamples >= 10, --max-increase "
                             f">= 0; got {args.confidence!r}, {args.resamples!r}, "
                             f"{args.max_increase!r}")
        if args.max_model_len is not None and args.max_model_len < 3:
            raise ValueError(f"--max-model-len must be >= 3, got {args.max_model_len!r}")
        result = evaluate_perplexity(
            [u.rstrip("/") for u in args.url], read_texts(args.texts),
            max_len=args.max_model_len, method=args.method, concurrency=args.concurrency,
            timeout_s=args.timeout, confidence=args.confidence, resamples=args.resamples)
        result["verdict"], result["reason"] = perplexity_verdict(result, args.max_increase)
        if args.html:
            write_text_atomic(args.html, perplexity_html(result))
    except (EvalInputError, ValueError, OSError) as exc:
        return fail("perplexity", exc)
    lines = [f"verdict: {result['verdict'].upper()}: {result['reason']}"]
    lines += [f"{r['url']}: perplexity {r['perplexity']:.6g} ({r['method']})"
              for r in result["results"]]
    lines.append(f"{result['texts']} texts, {result['tokens']} tokens scored in "
                 f"{result['windows']} windows of <= {result['max_model_len'] - 1} tokens")
    emit(result, args.json, "\n".join(lines) + "\n")
    return verdict_exit(result["verdict"])
