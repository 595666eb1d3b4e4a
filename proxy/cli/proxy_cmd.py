"""`vllm-cutover proxy`: serve from the primary, mirror to the shadow, compare, keep evidence."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from proxy.cli.gate_args import add_gate_arguments, gate_criteria
from proxy.exitcodes import Exit

if TYPE_CHECKING:
    from proxy.mirror.config import ProxyConfig

TOKEN_ENV = "VLLM_CUTOVER_ADMIN_TOKEN"
GATE_TOKEN_ENV = "VLLM_CUTOVER_GATE_TOKEN"
ADMIN_URL_ENV = "VLLM_CUTOVER_ADMIN_URL"
# Where the client commands (cutover, tune, gate) look for the admin API by default; the
# proxy opens it only when asked (--admin-port): it is a control surface.
DEFAULT_ADMIN_PORT = 8001


def default_admin_url() -> str:
    """The admin URL client commands use without --admin-url: env, else loopback:8001."""
    return os.environ.get(ADMIN_URL_ENV) or f"http://127.0.0.1:{DEFAULT_ADMIN_PORT}"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "proxy",
        examples=[
            ("vllm-cutover proxy --port 8080 --primary http://old:8000 "
             "--shadow http://new:8000 --db records.db --admin-port 8001"),
        ],
        help="mirroring reverse proxy in front of the old (primary) and new (shadow) vLLM",
        description="Relay every request to the primary; mirror a sample of /v1/completions "
                    "and /v1/chat/completions to the shadow (and baseline), compare tokens "
                    "and latency, record the evidence, serve a gate on the admin port.",
    )
    p.add_argument("--port", type=int, default=8080, help="client port (default %(default)s)")
    p.add_argument("--host", default="0.0.0.0", help="client address (default %(default)s)")
    p.add_argument("--primary", required=True, metavar="URL", help="backend serving clients")
    p.add_argument("--shadow", metavar="URL",
                   help="backend mirrored to (none: serve from the primary alone, e.g. "
                        "before a cutover adds one)")
    p.add_argument("--baseline", metavar="URL",
                   help="second copy of the primary's version: measures old-vs-old noise")
    p.add_argument("--baseline-stream", action=argparse.BooleanOptionalAction, default=True,
                   help="stream mirrored requests to the baseline as the client asked (default:"
                        " on; the gate's latency reference, read like the shadow and paired per"
                        " request); --no-baseline-stream asks it unstreamed: same tokens, a "
                        "third less proxy CPU, streamed latency then judged against the primary")
    p.add_argument("--sample-rate", type=float, default=1.0, metavar="F",
                   help="fraction of generation requests mirrored (default %(default)s)")
    p.add_argument("--sample-header", metavar="NAME",
                   help="sample consistently by the hash of this request header")
    p.add_argument("--shadow-timeout", type=float, default=120.0, metavar="S",
                   help="total time allowed to a mirrored request (default %(default)s)")
    p.add_argument("--max-shadow-answer-bytes", type=int, default=32 * 1024 * 1024,
                   metavar="N",
                   help="a shadow or baseline answer larger than N bytes is recorded as "
                        "the error too_large and not read further (default %(default)s)")
    p.add_argument("--max-shadow-inflight", type=int, default=256, metavar="N",
                   help="mirrored requests in flight; beyond: dropped and counted")
    p.add_argument("--overload-lag-ms", type=float, default=10.0, metavar="MS",
                   help="shed new mirrors (dropped and counted) while the proxy's event loop "
                        "runs this late (moving average) and is busy with its own work (see "
                        "--overload-busy); 0: off (default %(default)s)")
    p.add_argument("--overload-busy", type=float, default=0.5, metavar="F",
                   help="...and its thread uses at least this share of a CPU (over about a "
                        "second): a loop late only because other processes hold the CPUs "
                        "keeps mirroring; 0: shed on lag alone, as before (default %(default)s)")
    p.add_argument("--max-worker-delay-ms", type=float, default=2000.0, metavar="MS",
                   help="shed new mirrors (worker_busy) while what the proxy sent the capture "
                        "worker has waited this long to be handled (default %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024, metavar="N",
                   help="request body limit; larger bodies get a 413 (default %(default)s)")
    p.add_argument("--db", default=":memory:", metavar="PATH",
                   help="SQLite file for records (default: in memory, lost on exit)")
    p.add_argument("--state-file", metavar="PATH",
                   help="routes (and the cutover) persisted here and restored at start, "
                        "where they win over --primary/--shadow/--baseline (default: "
                        "DB.state.json beside a --db file; none with the in-memory db; '' "
                        "for none)")
    p.add_argument("--reset-routes", action="store_true",
                   help="serve the command line's routes even when the state file has "
                        "others (they are then persisted over them)")
    p.add_argument("--driver", choices=("none", "docker"), default="none",
                   help="container driver of `vllm-cutover cutover` (default none: a cutover "
                        "can only adopt a running backend, --new-url). docker: the sidecar "
                        "creates, stops and removes vLLM containers through the Docker socket, "
                        "which is root on the host: mount it only into this sidecar")
    p.add_argument("--retention", type=int, default=100_000, metavar="N",
                   help="keep at most N records (default %(default)s)")
    p.add_argument("--store-text", action="store_true",
                   help="also store completion text and token ids (off: hashes and lengths)")
    p.add_argument("--admin-port", type=int, metavar="P2",
                   help=f"admin API port (default: off; {DEFAULT_ADMIN_PORT} is where "
                        "cutover, tune and gate look without --admin-url)")
    p.add_argument("--admin-host", default="127.0.0.1", help="admin address (default loopback)")
    p.add_argument("--admin-token", metavar="T",
                   help=f"bearer token for mutating admin calls, 8 characters or more "
                        f"(default: env {TOKEN_ENV}; without one they are refused)")
    p.add_argument("--gate-token", metavar="T",
                   help="read-only bearer token for the Argo Rollouts / Flagger gate endpoints "
                        f"(/admin/gate/analysis, /admin/gate/flagger...; or env {GATE_TOKEN_ENV}); "
                        "they also take the admin token")
    p.add_argument("--gate-open", action="store_true",
                   help="the Argo Rollouts / Flagger gate endpoints take no token (only on an "
                        "admin listener nothing outside the namespace reaches)")
    add_gate_arguments(p, "promotion gate (GET /admin/gate)")
    p.add_argument("--metrics-path", default="/_vllm_cutover/metrics", metavar="PATH",
                   help="the proxy's own metrics on the client port ('' for admin port only); "
                        "/metrics there is the primary's (default %(default)s)")
    p.add_argument("--header-timeout", type=float, default=60.0, metavar="S",
                   help="close a client connection that has not sent a complete request "
                        "head within S seconds of opening or of its previous answer "
                        "(slow clients; idle keep-alive) (default %(default)s)")
    p.add_argument("--body-timeout", type=float, default=60.0, metavar="S",
                   help="a request body must arrive whole within S seconds of its head "
                        "(a total bound, like nginx's client_body_timeout); a slower one "
                        "is answered 408 and its connection closed (default %(default)s)")
    p.add_argument("--max-idle-per-client", type=int, default=256, metavar="N",
                   help="idle connections (no request in flight) one client IP may hold; "
                        "one more closes its oldest (default %(default)s)")
    p.add_argument("--max-upstream-connections", type=int, default=1024, metavar="N",
                   help="connections the proxy opens to one backend per lane (client "
                        "traffic; mirrored traffic); a request beyond them waits for one, "
                        "up to the connect timeout, then fails (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                   help="on SIGTERM, time for requests in flight to finish (default %(default)s)")
    p.add_argument("--capture-in-process", action="store_true",
                   help="mirror, capture, compare and record on the proxy's own event loop "
                        "instead of a capture worker process (one process: for a one-CPU "
                        "container; the worker keeps that work off the client path's core)")
    p.add_argument("--worker-cpus", metavar="LIST", type=_cpu_list,
                   help="pin the capture worker to these CPUs, e.g. 1 or 2,3 "
                        "(default: the proxy's own)")
    p.add_argument("--worker-priority", choices=("nice", "idle", "normal"), default="nice",
                   help="nice (default): the capture worker runs at nice 10, below the relay "
                        "and the engines, yet keeps up on a host whose CPUs they keep busy; "
                        "idle: only on CPU time nothing else wants (Linux SCHED_IDLE: on a "
                        "busy host the worker falls behind and mirrors are shed)")
    p.set_defaults(func=_run)


def _cpu_list(text: str) -> tuple[int, ...]:
    try:
        cpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPU numbers like 1 or 2,3, got {text!r}") \
            from None
    if not cpus or min(cpus) < 0:
        raise argparse.ArgumentTypeError(f"expected CPU numbers like 1 or 2,3, got {text!r}")
    return cpus


def build_config(args: argparse.Namespace) -> ProxyConfig:
    """The only place argparse values become configuration (validated there)."""
    from proxy.mirror.config import (
        AdminConfig,
        MirrorConfig,
        ProxyConfig,
        RouteConfig,
        StoreConfig,
    )

    return ProxyConfig(
        routes=RouteConfig(args.primary, args.shadow, args.baseline),
        host=args.host,
        port=args.port,
        mirror=MirrorConfig(
            sample_rate=args.sample_rate,
            sample_header=args.sample_header,
            shadow_timeout_s=args.shadow_timeout,
            max_shadow_inflight=args.max_shadow_inflight,
            max_shadow_answer_bytes=args.max_shadow_answer_bytes,
            baseline_stream=args.baseline_stream,
            overload_lag_s=args.overload_lag_ms / 1000.0,
            overload_busy=args.overload_busy,
            max_worker_delay_s=args.max_worker_delay_ms / 1000.0,
        ),
        store=StoreConfig(db_path=args.db, retention_rows=args.retention,
                          store_text=args.store_text),
        admin=AdminConfig(host=args.admin_host, port=args.admin_port,
                          token=args.admin_token or os.environ.get(TOKEN_ENV) or None,
                          gate_token=args.gate_token or os.environ.get(GATE_TOKEN_ENV) or None,
                          gate_open=args.gate_open),
        gate=gate_criteria(args),
        max_body_bytes=args.max_body_bytes,
        main_metrics_path=args.metrics_path or None,
        drain_timeout_s=args.drain_timeout,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_idle_per_client=args.max_idle_per_client,
        max_upstream_connections=args.max_upstream_connections,
        capture_worker=not args.capture_in_process,
        worker_cpus=args.worker_cpus,
        worker_priority=args.worker_priority,
        state_file=_state_file(args.state_file, args.db),
        reset_routes=args.reset_routes,
        driver=args.driver,
    )


def _state_file(given: str | None, db: str) -> str | None:
    from proxy.mirror.config import default_state_file

    if given is not None:
        return given or None
    return default_state_file(db)


def _run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except ValueError as exc:  # ConfigError and GateCriteria's checks quote the value
        print(f"vllm-cutover proxy: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    from proxy.urls import role_conflicts

    routes = config.routes
    errors, warnings = role_conflicts(routes.primary, routes.shadow, routes.baseline,
                                      ("--primary", "--shadow", "--baseline"))
    for message in errors:
        print(f"vllm-cutover proxy: {message}", file=sys.stderr)
    if errors:
        return Exit.BAD_INPUT
    for message in warnings:
        print(f"vllm-cutover proxy: warning: {message}", file=sys.stderr)
    from proxy.mirror.server import run
    from proxy.statefile import StateFileError

    try:
        run(config)
    except StateFileError as exc:
        print(f"vllm-cutover proxy: {exc} (fix or move it, or start with --state-file '' "
              "to ignore it)", file=sys.stderr)
        return Exit.BAD_INPUT
    except OSError as exc:  # port in use, address not available, database not writable
        print(f"vllm-cutover proxy: cannot start: {exc}", file=sys.stderr)
        return Exit.FAIL
    return 0
