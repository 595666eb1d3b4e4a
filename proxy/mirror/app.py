"""The proxy's aiohttp application: factory, the catch-all handler, lifecycle.

Shared objects (router and its sessions, the state file, metrics, background
tasks, mirror, evidence, the control the cutover acts through; the store
in-process) live on the app under `web.AppKey`s and are
created and closed by `cleanup_ctx`, in an order that lets shutdown drain:
mirroring first (the capture worker finishes and records what it has), then the
connection pools, then the store.

Two modes (`ProxyConfig.capture_worker`): by default mirroring, capture,
comparison and records run in a capture worker process (`proxy.mirror.worker.remote`),
so the client path keeps its core; in-process, the same code runs on the proxy's
own event loop (one process; for a one-CPU container, and for unit tests).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from time import perf_counter
from typing import TYPE_CHECKING

from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from proxy.capture.request import (
    UNREADABLE,
    UnreadableRequest,
    endpoint_for_path,
    read_request,
    unmirrorable,
)
from proxy.capture.types import Endpoint
from proxy.cutover.shell.service import CUTOVER_KEY, CutoverService
from proxy.evidence.store import RecordStore, SqliteStore
from proxy.gate.stats import mann_whitney
from proxy.metrics import CONTENT_TYPE_LATEST, ProxyMetrics, status_class
from proxy.mirror.admission import ExchangeHandle, MirrorFront, flush_admission_forever
from proxy.mirror.candidates import CANDIDATES_KEY, CandidateMirrors, joined
from proxy.mirror.config import ProxyConfig
from proxy.mirror.control import MirrorControl
from proxy.mirror.evidence import Evidence, LocalEvidence, WorkerEvidence
from proxy.mirror.exchange import Mirror
from proxy.mirror.judging import current_verdict, refresh_verdict_forever
from proxy.mirror.listener import HEAD_LIMITS, GuardedRequestHandler, RateLimitedLog
from proxy.mirror.peers import PeerGuard
from proxy.mirror.relay import RelayResult, proxy_error, relay, request_headers
from proxy.mirror.route_state import restore_routes, route_persister
from proxy.mirror.upstream.routing import Router, Routes, make_pool_factory
from proxy.mirror.worker.remote import RemoteMirror
from proxy.statefile import StateFile
from proxy.tasks import BackgroundTasks, cancel_all, start_task
from proxy.tune.service import TUNE_KEY, TuneService

if TYPE_CHECKING:
    from proxy.cutover.shell.docker_driver import DockerDriver

log = logging.getLogger(__name__)

CONFIG_KEY = web.AppKey("config", ProxyConfig)
METRICS_KEY = web.AppKey("metrics", ProxyMetrics)
ROUTER_KEY = web.AppKey("router", Router)
STORE_KEY = web.AppKey("store", RecordStore)
TASKS_KEY = web.AppKey("tasks", BackgroundTasks)
MIRROR_KEY = web.AppKey("mirror", MirrorFront)
EVIDENCE_KEY = web.AppKey("evidence", Evidence)
STATE_KEY = web.AppKey("state", StateFile)  # sections: "routes" (router), "cutover"
CONTROL_KEY = web.AppKey("control", MirrorControl)  # what the cutover acts through
REFUSALS_KEY = web.AppKey("refusals", RateLimitedLog)  # bad input: one log line per 10 s
PEERS_KEY = web.AppKey("peers", PeerGuard)  # confirms each new mirror connection's peer


async def handle(request: web.Request) -> web.StreamResponse:
    """Relay any request to the primary; mirror sampled generation requests."""
    protocol = request.protocol
    if not isinstance(protocol, GuardedRequestHandler):
        return await _relay_request(request)
    protocol.request_started()  # not idle: the per-client idle cap leaves it be
    try:
        return await _relay_request(request)
    finally:
        protocol.request_finished()


async def _relay_request(request: web.Request) -> web.StreamResponse:
    app = request.app
    metrics = app[METRICS_KEY]
    endpoint = endpoint_for_path(request.path) if request.method == "POST" else None
    if endpoint is not None and not _framed(request):
        # HTTP/1.1 reads no body here: what follows would be parsed as the next request.
        metrics.proxy_errors.labels("411").inc()
        app[REFUSALS_KEY].warning("refused a %s %s without Content-Length or chunked "
                                  "encoding (411)", request.method, request.path)
        response = proxy_error(411, "a generation request needs a Content-Length or "
                                    "chunked encoding")
        response.force_close()
        return response
    config = app[CONFIG_KEY]
    try:
        body = await _read_body(request, config.body_timeout_s)
    except asyncio.TimeoutError:
        metrics.proxy_errors.labels("408").inc()
        app[REFUSALS_KEY].warning(
            "closed a request whose body did not arrive within --body-timeout %g s "
            "(Content-Length %s) for %s %s (408)", config.body_timeout_s,
            request.content_length, request.method, request.path)
        response = proxy_error(408, f"request body not received within "
                                    f"{config.body_timeout_s:g} s")
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        # Closed now: aiohttp would otherwise linger up to 10 s for the rest of the body.
        request.protocol.force_close()
        return response
    except web.HTTPRequestEntityTooLarge:
        metrics.proxy_errors.labels("413").inc()
        limit = config.max_body_bytes
        app[REFUSALS_KEY].warning(
            "refused a request body over --max-body-bytes: more than %d bytes (Content-Length "
            "%s) for %s %s (413)", limit, request.content_length, request.method, request.path)
        response = proxy_error(413, f"request body larger than the proxy's limit of "
                                    f"{limit} bytes")
        response.force_close()
        return response
    routes = app[ROUTER_KEY].routes
    primary = routes.primary.begin_relay()
    headers = request_headers(request.headers)
    exchange = None
    if endpoint is not None:
        exchange = _mirror(request, routes, headers, body, endpoint)
    result = RelayResult()
    started = perf_counter()
    try:
        return await relay(request, primary, body, headers, result,
                           exchange.tap_for if exchange is not None else None)
    finally:
        primary.end_relay()
        if exchange is not None:
            exchange.primary_done(result)
        if endpoint is not None and result.t_end and not result.cancelled:
            metrics.client_e2e.labels(endpoint).observe(result.t_end - started)
        metrics.requests.labels("primary", metrics.backend_label(primary.url),
                                endpoint or "other", status_class(result.status)).inc()
        if result.error in ("connect", "timeout"):
            metrics.proxy_errors.labels("502" if result.error == "connect" else "504").inc()


def _mirror(request: web.Request, routes: Routes, headers: CIMultiDict[str], body: bytes,
            endpoint: Endpoint) -> ExchangeHandle | None:
    """Start mirroring a sampled request (and, during a tune's race, every candidate's
    copy), or count why not. Its body is read here, once; one the proxy cannot read (or a
    stateful Responses request) goes to the primary only."""
    app = request.app
    mirror = app[MIRROR_KEY]
    admission = mirror.admission
    wanted = admission.wants(routes, request.headers)
    candidates = app.get(CANDIDATES_KEY)
    racing = candidates is not None and candidates.racing()
    if not wanted and not racing:
        return None
    try:
        req = read_request(body, app[CONFIG_KEY].max_body_bytes)
    except UnreadableRequest as exc:
        if wanted:
            admission.shed(routes, UNREADABLE)
            app[REFUSALS_KEY].warning("not mirrored: the body of %s %s is %s (relayed to "
                                      "the primary as sent)", request.method, request.path,
                                      exc)
        return None
    exchange = None
    stateful = unmirrorable(req, endpoint)
    if wanted:
        if stateful is not None:
            admission.shed(routes, stateful)
        else:
            exchange = mirror.start(routes, request.raw_path, headers, req, endpoint)
    if racing and candidates is not None and stateful is None:
        exchange = joined(exchange, candidates.start(routes, request.raw_path, headers, req,
                                                     endpoint))
    return exchange


async def _read_body(request: web.Request, timeout_s: float) -> bytes:
    if sys.version_info >= (3, 11):  # no task per request (wait_for makes one)
        async with asyncio.timeout(timeout_s):
            return await request.read()
    return await asyncio.wait_for(request.read(), timeout_s)


def _framed(request: web.Request) -> bool:
    return request.content_length is not None or "Transfer-Encoding" in request.headers


async def metrics_handler(request: web.Request) -> web.Response:
    body = await request.app[EVIDENCE_KEY].metrics()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(config: ProxyConfig, registry: CollectorRegistry | None = None) -> web.Application:
    """The client-facing application (the admin app is built from it by admin.build_admin_app)."""
    app = web.Application(client_max_size=config.max_body_bytes, handler_args=HEAD_LIMITS)
    app[CONFIG_KEY] = config
    app[REFUSALS_KEY] = RateLimitedLog()
    app[METRICS_KEY] = ProxyMetrics(registry if registry is not None else CollectorRegistry())
    app[PEERS_KEY] = PeerGuard()  # bound to the cutover service once that is open
    app.cleanup_ctx.append(_state_ctx)  # first: an unreadable file stops the start early
    if config.capture_worker:
        app.cleanup_ctx.append(_router_ctx)
        app.cleanup_ctx.append(_worker_ctx)
    else:
        app.cleanup_ctx.append(_store_ctx)
        app.cleanup_ctx.append(_router_ctx)
        app.cleanup_ctx.append(_tasks_ctx)
    app.cleanup_ctx.append(_control_ctx)
    app.cleanup_ctx.append(_cutover_ctx)
    app.cleanup_ctx.append(_tune_ctx)
    if config.main_metrics_path:
        app.router.add_get(config.main_metrics_path, metrics_handler)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY].store
    metrics = app[METRICS_KEY]
    sync = SqliteStore(config.db_path, config.retention_rows, config.store_text)
    store = RecordStore(sync, on_drop=metrics.drop_records)
    store.start()
    app[STORE_KEY] = store
    yield
    await store.close()


async def _state_ctx(app: web.Application) -> AsyncIterator[None]:
    # StateFileError (unreadable, or held by another proxy): the CLI exits 2.
    state = app[STATE_KEY] = StateFile(app[CONFIG_KEY].state_file, exclusive=True)
    yield
    state.close()


async def _router_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    state = app[STATE_KEY]
    routes, version, write = restore_routes(state, config.routes, config.reset_routes)
    persist = route_persister(state)
    if write:
        persist(routes, version)
    pools = make_pool_factory(config.connect_timeout_s, config.max_upstream_connections,
                              confirm=app[PEERS_KEY].confirm)
    router = Router(routes, pools, version, persist)
    app[ROUTER_KEY] = router
    app[METRICS_KEY].route_version.set(router.routes.version)
    yield
    await router.close()


async def _control_ctx(app: web.Application) -> AsyncIterator[None]:
    app[CONTROL_KEY] = MirrorControl(app[ROUTER_KEY], app[EVIDENCE_KEY], app[METRICS_KEY],
                                     app[CONFIG_KEY].gate)
    yield


async def _cutover_ctx(app: web.Application) -> AsyncIterator[None]:
    """The cutover service: resumes a persisted cutover that had not ended. Only with
    `--driver docker` is the Docker driver (the one module that touches the socket) made."""
    driver: DockerDriver | None = None
    if app[CONFIG_KEY].driver == "docker":
        from proxy.cutover.shell.docker_driver import DockerDriver

        driver = DockerDriver()  # connects on first use: a daemon down is a clear error then
    metrics = app[METRICS_KEY]
    service = CutoverService(app[STATE_KEY], app[CONTROL_KEY], driver,
                             on_state=lambda state: metrics.set_cutover(
                                 state.phase.value, state.deadline_unix, state.decision_in_s))
    await service.open()
    app[CUTOVER_KEY] = service
    app[PEERS_KEY].bind(service.confirm_peer)
    yield
    await service.close()
    if driver is not None:
        await asyncio.to_thread(driver.close)


async def _tune_ctx(app: web.Application) -> AsyncIterator[None]:
    """The tune service (it promotes through the cutover service) and its candidates'
    mirrors: a race's traffic goes to every candidate still racing."""
    config = app[CONFIG_KEY]
    service = TuneService(app[STATE_KEY], app[CONTROL_KEY], app[CUTOVER_KEY], config.gate)
    await service.open()
    app[TUNE_KEY] = service
    mirrors = app[CANDIDATES_KEY] = CandidateMirrors(config, service)
    yield
    await service.close()
    await mirrors.close(config.drain_timeout_s)


async def _tasks_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    tasks = BackgroundTasks()
    app[TASKS_KEY] = tasks
    mirror = app[MIRROR_KEY] = Mirror(config.mirror, tasks, app[METRICS_KEY], app[STORE_KEY])
    app[EVIDENCE_KEY] = LocalEvidence(app[STORE_KEY], config.gate, app[METRICS_KEY],
                                      mirror.flush_admission, mirror.judged_until)
    # Once before serving: the gauge shows the kept records' verdict at once, and the
    # statistics code (scipy: ~0.5 s to import) is loaded now, not on the store thread
    # mid-traffic, where holding the GIL that long would stall every client.
    mann_whitney([1.0, 2.0], [2.0, 3.0])
    await current_verdict(app[STORE_KEY], config.gate, app[METRICS_KEY])
    watchers = _watch(mirror, config)
    watchers.append(start_task(refresh_verdict_forever(
        app[STORE_KEY], config.gate, app[METRICS_KEY], config.gate_refresh_s,
        mirror.judged_until),
        "verdict-refresh"))
    yield
    await cancel_all(watchers)
    await tasks.drain(config.drain_timeout_s)
    mirror.flush_admission()


def _watch(mirror: MirrorFront, config: ProxyConfig) -> list[asyncio.Task[None]]:
    """The proxy's own load probe (for overload shedding) and the admission counts' flush."""
    watchers = [start_task(flush_admission_forever(mirror), "admission-flush")]
    if config.mirror.overload_lag_s > 0:
        watchers.append(start_task(mirror.admission.load.watch(), "loop-load"))
    return watchers


async def _worker_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    app[TASKS_KEY] = BackgroundTasks()  # the proxy's own (none per request in this mode)
    mirror = RemoteMirror(config, app[METRICS_KEY], config.worker_cpus,
                          app[PEERS_KEY].confirm)
    await mirror.open()
    app[MIRROR_KEY] = mirror
    app[EVIDENCE_KEY] = WorkerEvidence(mirror.link, app[METRICS_KEY], mirror.flush_admission)
    watchers = _watch(mirror, config)
    yield
    await cancel_all(watchers)
    await mirror.close(config.drain_timeout_s)
