"""`vllm-cutover demo`: launcher dry run, simulated old/new/baseline vLLMs, proxy, report."""

from __future__ import annotations

import argparse
import sys

from proxy.exitcodes import Exit


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        examples=[
            "vllm-cutover demo",
            "vllm-cutover demo --scenario regression --no-launcher",
        ],
        help="run the whole thing on simulated backends (no GPU, < 1 minute)",
        description=(
            "Show the launcher's dry run on the upgrade guide's command, start simulated old, "
            "new and baseline vLLM servers and the proxy on loopback ports; a cutover from old "
            "to new under steady client traffic (shadowing, the gate, promotion with the old "
            "one as the shadow, drain; or an abort), then the report and the HTML report."
        ),
    )
    parser.add_argument(
        "--scenario",
        choices=("regression", "healthy"),
        default="healthy",
        help="healthy: same speed, noise-level divergence: the cutover promotes it; "
        "regression: slower to first token and diverging on some prompts: the cutover "
        "aborts (default: %(default)s)",
    )
    parser.add_argument("--requests", type=int, default=180, help="client requests to send")
    parser.add_argument("--concurrency", type=int, default=8, help="clients streaming through the cutover")
    parser.add_argument(
        "--out-dir",
        metavar="DIR",
        help="where records.db and report.html go (default: a new temporary directory)",
    )
    parser.add_argument("--no-launcher", action="store_true", help="skip the launcher dry run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the traffic mix")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from proxy.demo.run import DemoConfig, run_demo

    try:
        config = DemoConfig(
            scenario=args.scenario,
            requests=args.requests,
            concurrency=args.concurrency,
            out_dir=args.out_dir,
            launcher=not args.no_launcher,
            seed=args.seed,
        )
    except ValueError as exc:
        print(f"vllm-cutover demo: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    return run_demo(config)
