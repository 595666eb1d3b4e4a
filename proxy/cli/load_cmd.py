"""`vllm-cutover load`: steady client traffic through the proxy, every answer checked in full
(proxy/demo/steady.py), for a rehearsal or a walkthrough: what the clients saw while a
cutover ran, as one summary line and the exit status."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from proxy.exitcodes import Exit
from proxy.tasks import start_task

if TYPE_CHECKING:
    from proxy.demo.steady import SteadyResult

PROGRESS_EVERY_S = 10.0
STREAMS = {"mixed": None, "always": True, "never": False}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "load",
        examples=[
            "vllm-cutover load --url http://127.0.0.1:8080 --requests 20",
            "vllm-cutover load --url http://127.0.0.1:8080 --clients 8 --duration 600",
        ],
        help="steady client traffic through the proxy, every answer checked in full",
        description=(
            "Clients that loop until stopped (Ctrl-C or SIGTERM), --duration or --requests, "
            "alternating chat and completions, three in four streamed; each asks for exactly "
            "--max-tokens tokens, so an answer counts as failed unless it is whole (status 200, "
            "that many tokens, finish reason 'length', a stream ending in [DONE]). Waits for "
            "--url to answer /v1/models first. Prints a progress line every 10 s and a summary "
            "at the end; exit 0 when no answer failed, 1 when one did. No prompt or answer "
            "text is printed."
        ),
    )
    add = parser.add_argument
    add("--url", required=True, metavar="URL", help="where clients send: the proxy's client port")
    add("--clients", type=int, default=8, metavar="N", help="concurrent clients")
    add("--requests", type=int, metavar="N",
        help="stop after N requests (default: run until --duration or a signal)")
    add("--duration", type=float, metavar="S", help="stop after S seconds (default: no limit)")
    add("--max-tokens", type=int, default=24, metavar="N", help="tokens each request asks for")
    add("--model", metavar="NAME", help="model to ask for (default: the first /v1/models lists)")
    add("--stream", choices=tuple(STREAMS), default="mixed",
        help="mixed: three in four requests streamed")
    add("--wait", type=float, default=30.0, metavar="S",
        help="how long --url may take to answer /v1/models before the load gives up")
    add("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=_run)


def _bad(args: argparse.Namespace) -> str | None:
    if args.clients < 1:
        return f"--clients must be >= 1, got {args.clients}"
    if args.requests is not None and args.requests < 1:
        return f"--requests must be >= 1, got {args.requests}"
    if args.duration is not None and args.duration <= 0:
        return f"--duration must be > 0 seconds, got {args.duration:g}"
    if args.max_tokens < 1:
        return f"--max-tokens must be >= 1, got {args.max_tokens}"
    if args.wait < 0:
        return f"--wait must be >= 0 seconds, got {args.wait:g}"
    if not args.url.startswith(("http://", "https://")):
        return f"--url must be an http:// or https:// URL, got {args.url!r}"
    return None


async def _first_model(url: str, wait_s: float) -> tuple[str | None, str]:
    """The first model `url` serves, once /v1/models answers 200 within `wait_s`;
    else None and why, in plain words."""
    import aiohttp

    deadline = time.monotonic() + wait_s
    why = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            try:
                async with session.get(url.rstrip("/") + "/v1/models") as resp:
                    body = await resp.read()
                    if resp.status == 200:
                        models = json.loads(body).get("data") or []
                        if models:
                            return str(models[0]["id"]), ""
                        why = "/v1/models lists no model"
                    else:
                        why = f"/v1/models answered HTTP {resp.status}"
            except aiohttp.ClientConnectorError:
                why = "nothing accepts connections there"
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError,
                    TypeError, AttributeError) as exc:
                why = f"/v1/models did not answer usably ({type(exc).__name__})"
            if time.monotonic() >= deadline:
                return None, why
            await asyncio.sleep(0.5)


def _summary(result: SteadyResult, seconds: float) -> dict[str, Any]:
    """The load's own summary (`SteadyResult.summary`) with its duration and rate."""
    base = result.summary()
    return {"requests": base["requests"], "failed": base["failed"], "errors": base["errors"],
            "streamed": base["streams"], "seconds": round(seconds, 3),
            "per_second": round(base["requests"] / seconds, 2) if seconds > 0 else 0.0}


def _line(summary: dict[str, Any]) -> str:
    text = (f"load: {summary['requests']} requests in {summary['seconds']:.1f} s "
            f"({summary['per_second']:g}/s), {summary['failed']} failed")
    if summary["errors"]:
        text += ": " + ", ".join(f"{kind} x{count}" for kind, count in
                                 sorted(summary["errors"].items(), key=lambda kv: -kv[1]))
    return text


async def _drive(args: argparse.Namespace, model: str) -> dict[str, Any]:
    from proxy.demo.steady import SteadyLoad

    load = SteadyLoad(args.url, model, clients=args.clients, max_tokens=args.max_tokens,
                      stream=STREAMS[args.stream], limit=args.requests)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            now = _summary(load.result, time.monotonic() - started)
            print(f"load: {now['requests']} requests so far ({now['per_second']:g}/s), "
                  f"{now['failed']} failed", file=sys.stderr, flush=True)

    ticker = start_task(progress(), "load-progress")
    if args.duration is not None:
        loop.call_later(args.duration, stop.set)
    try:
        await load.run(stop)
    finally:
        ticker.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return _summary(load.result, time.monotonic() - started)


def _run(args: argparse.Namespace) -> int:
    problem = _bad(args)
    if problem:
        print(f"vllm-cutover load: {problem}", file=sys.stderr)
        return Exit.BAD_INPUT

    async def main() -> int:
        model, why = (args.model, "") if args.model else await _first_model(args.url, args.wait)
        if model is None:
            print(f"vllm-cutover load: {args.url} did not serve a model within "
                  f"{args.wait:g} s: {why}", file=sys.stderr)
            return Exit.UNREACHABLE
        print(f"load: {args.clients} client(s) sending to {args.url} (model {model})",
              file=sys.stderr, flush=True)
        summary = await _drive(args, model)
        print(json.dumps(summary) if args.json else _line(summary), flush=True)
        return Exit.OK if summary["failed"] == 0 else Exit.FAIL

    return asyncio.run(main())
