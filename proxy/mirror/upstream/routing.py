"""Run-time routing: which backend is primary, shadow and baseline, changeable while serving.

A request takes a `Routes` snapshot when it starts and keeps the `Upstream`s of
that snapshot (and their connection pools) for its whole life, so a swap or a
replacement never breaks a request in flight. Primary traffic and mirrored
traffic never share a pool: an `Upstream` is keyed by (lane, URL), so a shadow
that hangs on to every connection of its pool cannot starve the primary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from proxy.credentials import without_credentials
from proxy.cutover.control import RouteConflict
from proxy.mirror.config import RouteConfig
from proxy.mirror.upstream.http1 import DEFAULT_MAX_CONNECTIONS, Http1Pool
from proxy.tasks import BackgroundTasks

log = logging.getLogger(__name__)

Lane = Literal["primary", "mirror"]
PoolFactory = Callable[[Lane, str], Http1Pool]
ConfirmUrl = Callable[[str], Awaitable["str | None"]]  # None: the peer is the one meant
# Called with the new routes and their version before they are published; raising
# (the state file cannot be written) leaves the current routes in place.
PersistRoutes = Callable[[RouteConfig, int], None]
CLOSE_TIMEOUT_S = 5.0  # a retired pool still closing at shutdown is cancelled after this


class Upstream:
    """One backend URL in one lane: its connection pool and a count of the requests using it.

    `users` keeps the pool open (client requests, and mirrored exchanges that may still
    call the backend); `relaying` counts the client requests alone, from before the
    request goes out until the backend's last byte has been relayed.

    `target` is the URL as configured (with credentials, if any); `url` names the backend
    everywhere else (records, metrics, logs, the admin API): without them.
    """

    __slots__ = ("_router", "active", "lane", "last_warning", "pool", "relaying", "target",
                 "url", "users")

    def __init__(self, target: str, lane: Lane, pool: Http1Pool, router: Router) -> None:
        self.target = target
        self.url = without_credentials(target)
        self.lane = lane
        self.pool = pool
        self.users = 0
        self.relaying = 0
        self.active = True  # part of the current routes
        self.last_warning = 0.0  # monotonic time of the last failure logged (no log floods)
        self._router = router

    def acquire(self) -> Upstream:
        self.users += 1
        return self

    def begin_relay(self) -> Upstream:
        self.relaying += 1
        return self.acquire()

    def end_relay(self) -> None:
        self.relaying -= 1
        self.release()

    def should_warn(self, every_s: float = 5.0) -> bool:
        """True at most once per `every_s`: an outage logs a line, not one per request."""
        now = time.monotonic()
        if now - self.last_warning < every_s:
            return False
        self.last_warning = now
        return True

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and not self.active:
            self._router._retire(self)


@dataclass(frozen=True)
class Routes:
    """An immutable snapshot of the routing table."""

    version: int
    primary: Upstream
    shadow: Upstream | None
    baseline: Upstream | None

    def as_config(self) -> RouteConfig:
        return RouteConfig(
            primary=self.primary.target,
            shadow=self.shadow.target if self.shadow else None,
            baseline=self.baseline.target if self.baseline else None,
        )

    def urls(self) -> dict[str, str | None]:
        """{"primary", "shadow", "baseline"} -> URL (what each record says it was between)."""
        return {
            "primary": self.primary.url,
            "shadow": self.shadow.url if self.shadow else None,
            "baseline": self.baseline.url if self.baseline else None,
        }

    def as_json(self) -> dict[str, object]:
        return {"version": self.version, **self.urls()}


class Router:
    """Holds the current `Routes`; `replace()` and `swap()` publish a new snapshot."""

    def __init__(self, initial: RouteConfig, pool_factory: PoolFactory, version: int = 1,
                 persist: PersistRoutes | None = None) -> None:
        self._factory = pool_factory
        self._persist = persist
        self._upstreams: dict[tuple[Lane, str], Upstream] = {}
        self._closing = BackgroundTasks()  # pools of retired upstreams, closing
        self.routes = self._build(initial, version=version)

    def _upstream(self, lane: Lane, url: str) -> Upstream:
        key = (lane, url)
        upstream = self._upstreams.get(key)
        if upstream is None:
            upstream = Upstream(url, lane, self._factory(lane, url), self)
            self._upstreams[key] = upstream
        upstream.active = True
        return upstream

    def _build(self, config: RouteConfig, version: int) -> Routes:
        return Routes(
            version=version,
            primary=self._upstream("primary", config.primary),
            shadow=self._upstream("mirror", config.shadow) if config.shadow else None,
            baseline=self._upstream("mirror", config.baseline) if config.baseline else None,
        )

    def snapshot(self, config: RouteConfig, version: int) -> Routes:
        """Routes for `config` labelled `version`, not published (the capture worker's view
        of the proxy's routes: it only needs their pools)."""
        return self._build(config, version)

    def replace(self, config: RouteConfig, expect_version: int | None = None) -> Routes:
        """Publish `config` as the new routes; pools no route uses close once idle.

        `expect_version`: compare-and-set, RouteConflict unless the current routes have
        that version. The routes are persisted (when a `persist` was given) before
        any request can take them.
        """
        old = self.routes
        if expect_version is not None and expect_version != old.version:
            raise RouteConflict(f"the routes are at version {old.version}, not "
                                f"{expect_version}: they changed since they were read")
        if self._persist is not None:
            self._persist(config, old.version + 1)
        for upstream in self._upstreams.values():
            upstream.active = False
        self.routes = self._build(config, old.version + 1)
        for upstream in list(self._upstreams.values()):
            if not upstream.active and upstream.users <= 0:
                self._retire(upstream)
        log.info("routes v%d: %s", self.routes.version, self.routes.urls())
        return self.routes

    def swap(self, expect_version: int | None = None) -> Routes:
        """Primary <-> shadow; the baseline stays. Raises ValueError without a shadow."""
        current = self.routes.as_config()
        if current.shadow is None:
            raise ValueError("no shadow to swap with")
        return self.replace(RouteConfig(current.shadow, current.primary, current.baseline),
                            expect_version)

    def inflight(self, by_target: bool = False) -> dict[str, dict[str, int]]:
        """Per backend URL: client requests being relayed ("primary") and mirrored
        exchanges still using it ("mirror": as shadow or baseline, or as the primary
        whose /tokenize they may call). Every backend of the current routes is listed.
        `by_target`: keyed by the URLs as configured (credentials included)."""
        out: dict[str, dict[str, int]] = {}
        for (_, target), upstream in self._upstreams.items():
            key = target if by_target else upstream.url
            counts = out.setdefault(key, {"primary": 0, "mirror": 0})
            counts["primary"] += upstream.relaying
            counts["mirror"] += upstream.users - upstream.relaying
        return out

    def _retire(self, upstream: Upstream) -> None:
        if self._upstreams.get((upstream.lane, upstream.target)) is not upstream:
            return
        del self._upstreams[(upstream.lane, upstream.target)]
        self._closing.spawn(upstream.pool.close(), f"close-{upstream.lane}-{upstream.url}")

    async def close(self) -> None:
        """Close every pool (at shutdown, after requests and background tasks ended)."""
        pools = [u.pool for u in self._upstreams.values()]
        self._upstreams.clear()
        await asyncio.gather(*(pool.close() for pool in pools), self._closing.drain(CLOSE_TIMEOUT_S),
                             return_exceptions=True)


def make_pool_factory(connect_timeout_s: float,
                      max_connections: int = DEFAULT_MAX_CONNECTIONS,
                      confirm: ConfirmUrl | None = None) -> PoolFactory:
    """Keep-alive pools of at most `max_connections`; the mirror lane's fail fast while
    their backend refuses and ask for unencoded answers (they are parsed, never relayed).
    `confirm(url)`: asked for each new mirror-lane connection before a prompt goes on it
    (`proxy.mirror.peers`); the primary lane is never held up by it."""

    def factory(lane: Lane, url: str) -> Http1Pool:
        mirror = lane == "mirror"
        # Mirrors are read by the capture worker at a lower priority: their reads are timed
        # by the kernel's arrival stamps, so a late read does not make a backend look slow.
        return Http1Pool(url, connect_timeout_s, fail_fast=mirror, stamped=mirror,
                         max_connections=max_connections, identity=mirror,
                         confirm=partial(confirm, url) if mirror and confirm else None)

    return factory
