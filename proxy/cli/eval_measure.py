"""`eval perplexity`, `eval perf` and `eval memory`: the measuring actions of `eval`."""

from __future__ import annotations

import argparse

from proxy.cli.eval_common import (
    add_output_arguments,
    emit,
    fail,
    verdict_exit,
    write_html,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perplexity",
                       examples=[
                           ("vllm-cutover eval perplexity --url http://old:8000 --url "
                            "http://new:8000 --texts texts.txt"),
                       ],
                       help="perplexity of the same texts on two engines, paired, with an interval",
                       description="Through the completions endpoint: prompt_logprobs where the "
                                   "engine has it, else echo + logprobs; texts cut into windows "
                                   "of the model length.")
    _add_urls(p)
    p.add_argument("--texts", required=True, metavar="FILE",
                   help='the texts: plain text, one text per paragraph (blank lines '
                        'between), or JSONL, one {"text": "..."} per line')
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
    _register_perf(sub)
    _register_memory(sub)


def _concurrencies(value: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"expected concurrencies like 1,4,16, got {value!r}")
    return levels


def _register_perf(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf",
                       examples=[
                           ("vllm-cutover eval perf --url http://old:8000 --url "
                            "http://new:8000 --concurrency 1,8"),
                       ],
                       help="TTFT, ITL, throughput of old and new side by side, with ratios",
                       description="The same requests at each concurrency on each engine, "
                                   "taking turns; our client, or `vllm bench serve`.")
    _add_urls(p)
    p.add_argument("--prompts", metavar="FILE",
                   help="JSONL prompt set as for `eval record` (our client; required without "
                        "--vllm-bench)")
    p.add_argument("--concurrency", type=_concurrencies, default=[1, 4], metavar="LIST",
                   help="comma-separated concurrencies (default 1,4)")
    p.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="runs per engine and concurrency, order flipped each round "
                        "(default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=64, metavar="N",
                   help="max_tokens of prompts that set none (default %(default)s)")
    p.add_argument("--keep-eos", action="store_true",
                   help="let answers stop at EOS (default: ignore_eos, equal lengths on both)")
    p.add_argument("--max-slowdown", type=float, default=1.25, metavar="X",
                   help="fail when new/old p50 TTFT or TPOT exceeds X or output throughput "
                        "falls below 1/X; 0: not judged (default %(default)s)")
    bench = p.add_argument_group("vllm bench serve instead of our client")
    bench.add_argument("--vllm-bench", metavar="PYTHON",
                       help="an interpreter with vLLM installed: run `vllm bench serve` with it")
    bench.add_argument("--tokenizer", metavar="PATH",
                       help="tokenizer for vllm bench's random dataset (the model's)")
    bench.add_argument("--num-prompts", type=int, default=32, metavar="N",
                       help="requests per run of vllm bench (default %(default)s)")
    bench.add_argument("--input-len", type=int, default=64, metavar="N",
                       help="random prompt length in tokens (default %(default)s)")
    bench.add_argument("--output-len", type=int, default=64, metavar="N",
                       help="output length in tokens (default %(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds one request (our client) or one bench run may take "
                        "(default %(default)s)")
    add_output_arguments(p)
    p.set_defaults(func=_run_perf)


def _register_memory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory",
                       examples=[
                           ("vllm-cutover eval memory --url http://old:8000 --url "
                            "http://new:8000"),
                       ],
                       help="KV-cache capacity and use, container and GPU memory, old vs new",
                       description="From each engine's /metrics (vllm:cache_config_info, "
                                   "vllm:kv_cache_usage_perc), Docker stats, NVML.")
    _add_urls(p)
    p.add_argument("--container", action="append", default=[], metavar="ID",
                   help="the engine's container, in the order of --url (Docker stats)")
    p.add_argument("--max-kv-drop", type=float, default=0.10, metavar="F",
                   help="fail when the new KV cache holds this share fewer tokens "
                        "(default %(default)s)")
    add_output_arguments(p)
    p.set_defaults(func=_run_memory)


def _run_perplexity(args: argparse.Namespace) -> int:
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.perplexity import evaluate_perplexity, read_texts
    from proxy.evaluate.render import perplexity_html, perplexity_text

    try:
        urls = _two_urls(args.url)
        if not 0 < args.confidence < 1 or args.resamples < 10 or args.max_increase < 0:
            raise ValueError(f"need 0 < --confidence < 1, --resamples >= 10, --max-increase "
                             f">= 0; got {args.confidence!r}, {args.resamples!r}, "
                             f"{args.max_increase!r}")
        if args.max_model_len is not None and args.max_model_len < 3:
            raise ValueError(f"--max-model-len must be >= 3, got {args.max_model_len!r}")
        result = evaluate_perplexity(
            urls, read_texts(args.texts),
            max_len=args.max_model_len, method=args.method, concurrency=args.concurrency,
            timeout_s=args.timeout, confidence=args.confidence, resamples=args.resamples,
            max_increase=args.max_increase)
        if args.html:
            write_html(args.html, perplexity_html(result))
    except (EvalInputError, ValueError, OSError) as exc:
        return fail("perplexity", exc)
    emit(result, args.json, perplexity_text(result))
    return verdict_exit(result.verdict)


def _run_perf(args: argparse.Namespace) -> int:
    from proxy.evaluate.client import EngineInfo
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.perf import BenchTool, side_by_side, verdict
    from proxy.evaluate.prompts import EvalRequest, read_prompts
    from proxy.evaluate.render import perf_html, perf_text
    from proxy.evaluate.replaying import engine_infos, with_model
    from proxy.evaluate.results import PerfResult

    try:
        urls = _two_urls(args.url)
        if args.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {args.rounds!r}")
        infos: list[EngineInfo] = engine_infos(urls)
        tool = None
        requests: list[EvalRequest] = []
        if args.vllm_bench is not None:
            if args.tokenizer is None:
                raise ValueError("--vllm-bench needs --tokenizer (vllm bench's random dataset)")
            tool = BenchTool(args.vllm_bench, args.tokenizer, args.input_len, args.output_len,
                             args.num_prompts)
        elif args.prompts is None:
            raise ValueError("give --prompts (our client) or --vllm-bench")
        else:
            requests = with_model(read_prompts(args.prompts, logprobs=1, max_tokens=args.max_tokens),
                                  infos[0], ignore_eos=not args.keep_eos)
        levels = side_by_side(urls, [i.model or "" for i in infos], requests,
                              args.concurrency, rounds=args.rounds, timeout_s=args.timeout,
                              tool=tool)
        judged = verdict([lv.ratios for lv in levels if lv.ratios is not None],
                         args.max_slowdown)
        result = PerfResult("vllm bench serve" if tool else "vllm-cutover", urls, levels,
                            *judged)
        if args.html:
            write_html(args.html, perf_html(result))
    except (EvalInputError, ValueError, OSError) as exc:
        return fail("perf", exc)
    emit(result, args.json, perf_text(result))
    return verdict_exit(result.verdict)


def _run_memory(args: argparse.Namespace) -> int:
    from proxy.evaluate.jsonl import EvalInputError
    from proxy.evaluate.memory import memory_report
    from proxy.evaluate.render import memory_html, memory_text

    try:
        urls = _two_urls(args.url)
        if len(args.container) > len(urls):
            raise ValueError(f"--container at most once per --url, got {args.container}")
        if not 0 <= args.max_kv_drop <= 1:
            raise ValueError(f"--max-kv-drop must be within [0, 1], got {args.max_kv_drop!r}")
        result = memory_report(urls, args.container, args.max_kv_drop)
        if args.html:
            write_html(args.html, memory_html(result))
    except (EvalInputError, ValueError, OSError) as exc:
        return fail("memory", exc)
    emit(result, args.json, memory_text(result))
    return verdict_exit(result.verdict)


def _add_urls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", action="append", required=True, metavar="URL",
                   help="an engine; give it twice: old first, new second")


def _two_urls(urls: list[str]) -> list[str]:
    if len(urls) > 2:
        raise ValueError(f"--url at most twice (old, new), got {len(urls)}")
    return [u.rstrip("/") for u in urls]
