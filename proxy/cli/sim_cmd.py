"""`vllm-cutover sim`: run a simulated OpenAI-compatible vLLM server."""

from __future__ import annotations

import argparse
import sys

from proxy.exitcodes import Exit


def _natural_range(value: str) -> tuple[int, int]:
    low, sep, high = value.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX token counts, got {value!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sim",
        examples=[
            "vllm-cutover sim --port 8000 --ttft-ms 40 --itl-ms 15",
            ("vllm-cutover sim --port 8001 --divergence-rate 0.05 "
             "--error-rate 0.01"),
        ],
        help="run a simulated vLLM (OpenAI API, deterministic tokens, injectable faults)",
        description=(
            "A simulated vLLM OpenAI-compatible server for demos, tests and benchmarks: "
            "/v1/completions, /v1/chat/completions (tools, tool_choice, response_format) and "
            "/v1/responses (streaming or not), /health, /version, "
            "/v1/models, /tokenize, /detokenize, /metrics. Deterministic requests "
            "(temperature 0 or a seed) get tokens derived from the prompt hash."
        ),
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    add(
        "--port",
        type=int,
        default=8000,
        metavar="P",
        help="listen port; 0 picks a free one (the ready line on stdout says which)",
    )
    add("--model-name", default="sim-model", metavar="NAME", help="served model name")
    add("--version", default="0.32.0-sim", metavar="V", help="what /version reports")
    add("--max-model-len", type=int, default=4096, metavar="N", help="context length")
    add("--ttft-ms", type=float, default=0.0, metavar="MS", help="time to first token")
    add(
        "--itl-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="inter-token latency (0: stream as fast as possible, batched writes)",
    )
    add("--jitter", type=float, default=0.0, metavar="F", help="relative jitter of each delay")
    add("--ttft-tail-share", type=float, default=0.0, metavar="F",
        help="share of requests whose first token is --ttft-tail-factor times later")
    add("--ttft-tail-factor", type=float, default=1.0, metavar="X",
        help="how much later (a tail-only TTFT regression; default 1: none)")
    add("--tokens-per-chunk", type=int, default=1, metavar="N", help="tokens per SSE event")
    add(
        "--natural-tokens",
        type=_natural_range,
        default=(16, 128),
        metavar="MIN:MAX",
        help="length range of answers that stop by themselves (default 16:128)",
    )
    add(
        "--divergence-at",
        type=int,
        default=None,
        metavar="N",
        help="token index of the divergence (default: chosen by the prompt hash)",
    )
    rates = (
        ("--divergence-rate", "fraction of deterministic requests whose tokens diverge"),
        ("--error-rate", "fraction answered HTTP 500"),
        ("--reset-rate", "fraction whose connection is dropped mid-answer"),
        ("--garbage-rate", "fraction with invalid SSE (or truncated JSON)"),
    )
    for flag, text in rates:
        add(flag, type=float, default=0.0, metavar="F", help=text)
    add("--seed", type=int, default=0, help="seed of faults, divergence and sampling")
    # Structured answers (proxy.sim.agentic).
    add("--reasoning", action="store_true",
        help="answer chat and Responses-API requests with a reasoning part before the content")
    add("--diverge-field", default=None, metavar="FIELD",
        help="make every deterministic answer differ in one field only: content (the "
             "tokens of every choice), choice:N (choice N's tokens), tool_arguments, reasoning")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from proxy.sim.config import SimConfig, SimConfigError

    known = {f.name for f in fields(SimConfig)}
    values = {name: value for name, value in vars(args).items() if name in known}
    values["min_natural_tokens"], values["max_natural_tokens"] = args.natural_tokens
    try:
        config = SimConfig(**values)
    except SimConfigError as exc:
        print(f"vllm-cutover sim: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    from proxy.sim.server import serve

    return serve(config)
