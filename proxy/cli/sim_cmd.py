"""`vllm-cutover sim`: run a simulated OpenAI-compatible vLLM server."""

from __future__ import annotations

import argparse
import sys


def _natural_range(value: str) -> tuple[int, int]:
    low, sep, high = value.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX token counts, got {value!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run a simulated vLLM (OpenAI API, deterministic tokens, injectable faults)",
        description=(
            "A simulated vLLM OpenAI-compatible server for demos, tests and benchmarks: "
            "/v1/completions and /v1/chat/completions (streaming or not), /health, /version, "
            "/v1/models, /tokenize, /detokenize, /metrics. Deterministic requests "
            "(temperature 0 or a seed) get tokens derived from the prompt hash."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="listen port (default: %(default)s)")
    parser.add_argument("--model-name", default="sim-model", help="served model name")
    parser.add_argument(
        "--version", dest="version", default="0.32.0-sim", help="what /version reports"
    )
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="time to first token")
    parser.add_argument("--itl-ms", type=float, default=0.0, help="inter-token latency")
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="relative jitter of each delay, 0..1"
    )
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per SSE event")
    parser.add_argument(
        "--natural-tokens",
        type=_natural_range,
        default=(16, 128),
        metavar="MIN:MAX",
        help="length range of answers that stop by themselves (default 16:128)",
    )
    parser.add_argument(
        "--divergence-rate",
        type=float,
        default=0.0,
        help="fraction of deterministic requests whose tokens diverge",
    )
    parser.add_argument(
        "--divergence-at", type=int, default=None, help="token index of the divergence"
    )
    parser.add_argument("--error-rate", type=float, default=0.0, help="fraction answered HTTP 500")
    parser.add_argument("--reset-rate", type=float, default=0.0, help="fraction dropped mid-answer")
    parser.add_argument(
        "--garbage-rate", type=float, default=0.0, help="fraction with invalid SSE/JSON"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of faults, divergence and sampling"
    )
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
        return 2
    from proxy.sim.server import serve

    return serve(config)
